"""Workers as real processes, killed mid-flight: no job lost, no duplicate Result.

SIGKILL gives no chance to clean up: the dead worker's uncommitted records are redelivered to
its replacement once the group notices (session timeout), and a decode that finds its KV
buffer gone prefills again. SIGTERM drains: in-flight work finishes and is committed first.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest

from pipeline import schema
from pipeline.client import StepwiseClient
from pipeline.local.workers import WorkerProcesses, engine_core_pid, gone
from tests.integration.pipeline_helpers import count_results

pytestmark = pytest.mark.slow

NUM_JOBS = 10


@pytest.fixture
def workers(kafka_bootstrap, redis_url, topics, tmp_path, verify_worker):
    w = WorkerProcesses(kafka_bootstrap, redis_url, topics.prefix, tmp_path)
    yield w
    w.stop_all()


def jobs() -> list[schema.Job]:
    tag = uuid.uuid4().hex[:6]
    return [
        schema.Job(
            id=f"crash-{tag}-{i}",
            prompt=f"What is {10 + i} + {20 + 3 * i}?",
            params=schema.JobParams(temperature=0.7, seed=i, max_tokens=200),
        )
        for i in range(NUM_JOBS)
    ]


async def submit_and_kill(kafka, prefix, batch, when_events, kill, kind="step"):
    """Submit, wait until `when_events` events of `kind` arrived, `kill()`, collect Results."""
    results: dict[str, int] = {}
    steps = 0
    killed = False
    async with StepwiseClient(kafka, prefix) as client:
        for j in batch:
            await client.submit(j)
        async for msg in client.follow({j.id for j in batch}, timeout_s=150):
            if isinstance(msg, schema.Event) and msg.kind == kind:
                steps += 1
            if not killed and steps >= when_events:
                kill()
                killed = True
            if isinstance(msg, schema.Result):
                assert msg.status == "ok", msg.error
                results[msg.id] = results.get(msg.id, 0) + 1
    assert killed, "the kill never happened: jobs finished too fast"
    return results


def check_every_job_once(counts: dict[str, int], batch, workers) -> None:
    missing = [j.id for j in batch if j.id not in counts]
    dupes = {k: n for k, n in counts.items() if n > 1}
    assert not missing and not dupes, f"missing={missing} dupes={dupes}\n{workers.logs()}"


@pytest.mark.parametrize("victim", ["decode", "prefill"])
async def test_sigkill_mid_flight_loses_nothing_and_duplicates_nothing(
    workers, kafka_bootstrap, topics, victim
):
    procs = {name: workers.start(name) for name in ("ingest", "prefill", "decode")}
    batch = jobs()
    # Prefill is quick: kill it as soon as ingest admits a job; decode once it is decoding.
    when, kind = (1, "accepted") if victim == "prefill" else (3, "step")

    core = engine_core_pid(procs["decode"])

    def kill():
        procs[victim].send_signal(signal.SIGKILL)
        workers.start(victim)  # the replacement joins the group and gets the partitions

    try:
        await submit_and_kill(kafka_bootstrap, topics.prefix, batch, when, kill, kind)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{workers.logs()}") from e
    check_every_job_once(await count_results(kafka_bootstrap, topics.prefix), batch, workers)
    # A killed decode worker takes its engine core with it (PR_SET_PDEATHSIG): no orphan
    # holding the engine's memory.
    assert gone(core) if victim == "decode" else not gone(core, 0.5), workers.logs()


async def test_a_dead_engine_core_stops_its_worker_and_loses_nothing(
    workers, kafka_bootstrap, topics
):
    procs = {name: workers.start(name) for name in ("ingest", "prefill", "decode")}
    batch = jobs()
    core = engine_core_pid(procs["decode"])

    def kill_core():
        os.kill(core, signal.SIGKILL)
        workers.start("decode")

    try:
        await submit_and_kill(kafka_bootstrap, topics.prefix, batch, 3, kill_core)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{workers.logs()}") from e
    # The worker cannot go on without its engine: it stops at once, without its drain, and
    # says so with its exit code; its jobs went to the replacement.
    assert procs["decode"].wait(timeout=30) != 0, workers.logs()
    assert "engine process died" in workers.logs()
    check_every_job_once(await count_results(kafka_bootstrap, topics.prefix), batch, workers)


async def test_sigterm_drains_in_flight_work(workers, kafka_bootstrap, topics):
    procs = {name: workers.start(name) for name in ("ingest", "prefill", "decode")}
    batch = jobs()
    exit_codes = []

    def stop_gracefully():
        procs["decode"].send_signal(signal.SIGTERM)
        workers.start("decode")

    try:
        await submit_and_kill(kafka_bootstrap, topics.prefix, batch, 3, stop_gracefully)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{workers.logs()}") from e
    exit_codes.append(procs["decode"].wait(timeout=60))
    assert exit_codes == [0], workers.logs()
    check_every_job_once(await count_results(kafka_bootstrap, topics.prefix), batch, workers)
    await asyncio.sleep(0)
