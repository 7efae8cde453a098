"""One trace per job across the real stack's processes (docs/tracing.md): ingest, prefill and
decode join through the Kafka records' `traceparent`, each verify check through its Celery
task's headers; a job that fails has its error on the span of the stage that failed it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from pipeline import schema, settings
from pipeline.client import StepwiseClient
from pipeline.local.stack import Stack
from pipeline.tracing import store

pytestmark = pytest.mark.slow


def own_db(redis_url: str, db: int) -> str:
    """The same Redis, another database: the session's Celery verify worker (conftest) serves
    the default one's queue and would take this stack's checks, untraced."""
    parts = urlsplit(redis_url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def wait_for_spans(folder, job_id: str, names: set[str], timeout_s: float = 20) -> list[dict]:
    """The job's spans once every stage in `names` has written its own (exports are batched)."""
    got: list[dict] = []
    for _ in range(int(timeout_s / 0.2)):
        got = store.trace_of(store.read_spans(folder), job_id)
        if names <= {s["name"] for s in got}:
            return got
        time.sleep(0.2)
    raise AssertionError(f"spans of {job_id}: {sorted(s['name'] for s in got)}")


def test_a_verified_job_is_one_trace_across_four_processes(
    kafka_bootstrap, redis_url, topics, monkeypatch, tmp_path
):
    traces = tmp_path / "traces"
    for name, value in {
        "STEPWISE_KAFKA": kafka_bootstrap, "STEPWISE_REDIS": own_db(redis_url, 9),
        "OMP_NUM_THREADS": "1", "STEPWISE_TRACE_SAMPLE": "1", "STEPWISE_TRACE_DIR": str(traces),
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    config = settings.current().pipeline(topic_prefix=topics.prefix, model="tiny-reasoner")
    ok = schema.Job(id="traced-1", prompt="What is 4 + 5?", params=schema.JobParams(seed=1))
    too_long = schema.Job(id="traced-long", prompt="1 + 1 = 2. " * 400)

    async def run() -> dict[str, schema.Result]:
        out: dict[str, schema.Result] = {}
        async with StepwiseClient(kafka_bootstrap, topics.prefix) as client:
            await client.submit(ok)
            await client.submit(too_long)
            async for msg in client.follow({ok.id, too_long.id}, timeout_s=120):
                if isinstance(msg, schema.Result):
                    out[msg.id] = msg
                    if len(out) == 2:
                        return out
        raise AssertionError(f"Results: {sorted(out)}")

    with Stack(config, log_dir=tmp_path, workers=("ingest", "prefill", "decode", "verify")):
        results = asyncio.run(run())
        assert results[ok.id].status == "ok" and results[ok.id].steps
        assert results[too_long.id].status == "rejected"
        spans = wait_for_spans(traces, ok.id, {"ingest", "prefill", "decode", "verify"})
        failed = wait_for_spans(traces, too_long.id, {"ingest"})

    assert len({s["trace_id"] for s in spans}) == 1
    processes = {(s["host"], s["pid"]) for s in spans}
    assert len(processes) >= 4, processes
    by_id = {s["span_id"]: s for s in spans}
    parent = {s["name"]: by_id.get(s["parent_id"], {}).get("name") for s in spans}
    assert parent["ingest"] is None and parent["prefill"] == "ingest"
    assert parent["decode"] == "prefill" and parent["verify"] == "decode"
    checks = [s for s in spans if s["name"] == "verify"]
    assert len(checks) >= 1  # a check per step sent (a step without claims is checked too)
    assert all(s["attributes"]["stepwise.verdict"] for s in checks)
    decode = next(s for s in spans if s["name"] == "decode")
    assert decode["attributes"]["stepwise.status"] == "ok" and decode["status"] != "error"
    assert [e["name"] for e in decode["events"]].count("step") == len(results[ok.id].steps)
    prefill = next(s for s in spans if s["name"] == "prefill")
    assert prefill["attributes"]["stepwise.bytes"] > 0
    # The rejected job: its error on ingest's span, and no stage after it.
    assert {s["name"] for s in failed} == {"ingest"}
    assert failed[0]["status"] == "error" and "PromptTooLong" in failed[0]["error"]
    # `stepwise trace` prints the tree from the same store.
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "trace", ok.id, "--json", "--dir", str(traces)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    tree = json.loads(out.stdout)["tree"]
    assert tree[0]["name"] == "ingest" and tree[0]["children"][0]["name"] == "prefill"
    missing = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "trace", "no-such-job", "--dir", str(traces)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 2 and "no spans of job" in missing.stderr


def test_paths_puts_an_injected_slow_verify_worker_on_the_heaviest_path(
    kafka_bootstrap, redis_url, topics, monkeypatch, tmp_path
):
    traces = tmp_path / "traces"
    for name, value in {
        "STEPWISE_KAFKA": kafka_bootstrap, "STEPWISE_REDIS": own_db(redis_url, 10),
        "OMP_NUM_THREADS": "1", "STEPWISE_TRACE_SAMPLE": "1", "STEPWISE_TRACE_DIR": str(traces),
        "STEPWISE_VERIFY_CONCURRENCY": "2", "STEPWISE_VERIFY_TEST_DELAY_MS": "300",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    config = settings.current().pipeline(topic_prefix=topics.prefix, model="tiny-reasoner")
    jobs = [
        schema.Job(id=f"paths-{i}", prompt=f"What is {i + 3} + {2 * i + 5}?",
                   params=schema.JobParams(seed=i))
        for i in range(8)
    ]  # fmt: skip

    async def run() -> None:
        done: set[str] = set()
        async with StepwiseClient(kafka_bootstrap, topics.prefix) as client:
            for j in jobs:
                await client.submit(j)
            async for msg in client.follow({j.id for j in jobs}, timeout_s=180):
                if isinstance(msg, schema.Result):
                    assert msg.status == "ok", msg
                    done.add(msg.id)
                    if len(done) == len(jobs):
                        return

    with Stack(config, log_dir=tmp_path, workers=("ingest", "prefill", "decode", "verify")):
        asyncio.run(run())
        for j in jobs:
            wait_for_spans(traces, j.id, {"ingest", "prefill", "decode", "verify"})
        time.sleep(0.5)  # the last checks' spans
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "paths", "--json", "--dir", str(traces),
         "--svg", str(tmp_path / "paths.svg")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    graph = json.loads(out.stdout)
    checks = {e["dst"]: e for e in graph["edges"] if e["dst"].startswith("verify@")}
    assert len(checks) == 2, checks  # both pool children checked steps
    slow = max(checks, key=lambda n: checks[n]["p99_ms"])
    fast = min(checks, key=lambda n: checks[n]["p99_ms"])
    assert checks[slow]["p99_ms"] >= 300 > checks[fast]["p99_ms"], checks
    heaviest = graph["heaviest"][0]["path"]
    assert heaviest[-1] == slow and [n.split("@")[0] for n in heaviest] == [
        "ingest", "prefill", "decode", "verify"
    ]  # fmt: skip
    assert "#d62728" in (tmp_path / "paths.svg").read_text()
