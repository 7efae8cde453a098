"""One trace per job across the real stack's processes (docs/tracing.md): the gateway's submit,
ingest, prefill and decode join through the Kafka records' `traceparent`, each verify check
through its Celery task's headers, under the span of the step it judged; a job that backtracks
shows it; a job that fails has its error on the span of the stage that failed it."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlsplit, urlunsplit

import pytest

from pipeline import schema
from pipeline.client import StepwiseClient
from pipeline.config import PipelineConfig
from pipeline.local.stack import Stack
from pipeline.tracing import store
from tests.integration.test_verify import PROBLEM, first_wrong_seed

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post_job(port: int, job: schema.Job) -> None:
    """Submit through the gateway's HTTP API (where a job's trace starts when it comes that way)."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/jobs", data=schema.encode_json(job), method="POST",
        headers={"content-type": "application/json"},
    )  # fmt: skip
    for _ in range(100):  # the gateway may still be starting
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                assert resp.status == 202
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the gateway never took the job")


def test_a_verified_job_that_backtracks_is_one_trace_across_the_stack(
    kafka_bootstrap, redis_url, topics, monkeypatch, tmp_path
):
    traces, port = tmp_path / "traces", free_port()
    for name, value in {
        "STEPWISE_KAFKA": kafka_bootstrap, "STEPWISE_REDIS": own_db(redis_url, 9),
        "OMP_NUM_THREADS": "1", "STEPWISE_TRACE_SAMPLE": "1", "STEPWISE_TRACE_DIR": str(traces),
        "STEPWISE_GATEWAY_PORT": str(port),
        # Every verdict from the Celery worker, so the checks are spans of the trace (a false
        # arithmetic step would otherwise be contradicted in decode, with no check to trace).
        "STEPWISE_FAST_VERDICTS": "0",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    config = PipelineConfig.from_settings(topic_prefix=topics.prefix, model="tiny-reasoner")
    # A seed whose first attempt writes a step the checker contradicts: at least one backtrack.
    seed = first_wrong_seed(PROBLEM, max_tokens=160)
    params = schema.JobParams(temperature=0.7, seed=seed, max_tokens=160, verify="async")
    ok = schema.Job(id="traced-1", prompt=PROBLEM, params=params)
    too_long = schema.Job(id="traced-long", prompt="1 + 1 = 2. " * 400)

    async def run() -> dict[str, schema.Result]:
        out: dict[str, schema.Result] = {}
        async with StepwiseClient(kafka_bootstrap, topics.prefix) as client:
            post_job(port, ok)
            await client.submit(too_long)
            async for msg in client.follow({ok.id, too_long.id}, timeout_s=180):
                if isinstance(msg, schema.Result):
                    out[msg.id] = msg
                    if len(out) == 2:
                        return out
        raise AssertionError(f"Results: {sorted(out)}")

    workers = ("gateway", "ingest", "prefill", "decode", "verify")
    with Stack(config, log_dir=tmp_path, workers=workers):
        results = asyncio.run(run())
        assert results[ok.id].status == "ok" and results[ok.id].steps
        assert results[ok.id].usage.backtracks >= 1
        assert results[too_long.id].status == "rejected"
        names = {"submit", "ingest", "prefill", "decode", "kv_import", "step", "verify"}
        spans = wait_for_spans(traces, ok.id, names)
        failed = wait_for_spans(traces, too_long.id, {"ingest"})

    assert len({s["trace_id"] for s in spans}) == 1
    processes = {(s["host"], s["pid"]) for s in spans}
    assert len(processes) >= 5, processes  # gateway, ingest, prefill, decode, verify
    by_id = {s["span_id"]: s for s in spans}
    parent = {s["name"]: by_id.get(s["parent_id"], {}).get("name") for s in spans}
    assert parent["submit"] is None and parent["ingest"] == "submit"
    assert parent["prefill"] == "ingest" and parent["decode"] == "prefill"
    assert parent["kv_import"] == "decode" and parent["step"] == "decode"
    lookups = [s for s in spans if s["name"] == "cache.lookup"]
    assert {s["attributes"]["stepwise.level"] for s in lookups} == {"answer", "prefix"}
    assert all(by_id[s["parent_id"]]["name"] == "ingest" for s in lookups)
    checks = [s for s in spans if s["name"] == "verify"]
    assert len(checks) >= 1 and all(s["attributes"]["stepwise.verdict"] for s in checks)
    # Each check sits under the span of the step it judged.
    for check in checks:
        step = by_id[check["parent_id"]]
        assert step["name"] == "step"
        assert step["attributes"]["stepwise.index"] == check["attributes"]["stepwise.step"]
    assert any(s["attributes"]["stepwise.verdict"] == "contradicted" for s in checks)
    decode = next(s for s in spans if s["name"] == "decode")
    result = results[ok.id]
    assert decode["attributes"]["stepwise.status"] == "ok" and decode["status"] != "error"
    assert decode["attributes"]["stepwise.backtracks"] == result.usage.backtracks
    events = [e["name"] for e in decode["events"]]
    assert events.count("backtrack") == result.usage.backtracks and "verdict" in events
    steps = [s for s in spans if s["name"] == "step"]
    assert len(steps) > len(result.steps)  # the kept chain plus the attempts thrown away
    assert {s["attributes"]["stepwise.index"] for s in steps} >= set(range(len(result.steps)))
    kv = next(s for s in spans if s["name"] == "kv_import")
    assert kv["attributes"]["stepwise.transport"] == "shm_pool"
    assert kv["attributes"]["stepwise.bytes"] > 0 and kv["status"] != "error"
    prefill = next(s for s in spans if s["name"] == "prefill")
    assert prefill["attributes"]["stepwise.bytes"] > 0
    # Calls between processes name their caller (the edges of the anomaly-path graph).
    assert by_id[prefill["parent_id"]]["pid"] != prefill["pid"]
    assert prefill["attributes"]["stepwise.caller"].startswith("ingest@")
    # The rejected job: its error on ingest's span, and no stage after it.
    assert {s["name"] for s in failed} <= {"ingest", "cache.lookup"}
    rejected = next(s for s in failed if s["name"] == "ingest")
    assert rejected["status"] == "error" and "PromptTooLong" in rejected["error"]
    # `stepwise trace` prints the tree from the same store.
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "trace", ok.id, "--json", "--dir", str(traces)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    tree = json.loads(out.stdout)["tree"]
    assert tree[0]["name"] == "submit" and tree[0]["children"][0]["name"] == "ingest"
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
        "STEPWISE_VERIFY_CONCURRENCY": "2", "STEPWISE_VERIFY_TEST_DELAY_MS": "800",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    config = PipelineConfig.from_settings(topic_prefix=topics.prefix, model="tiny-reasoner")
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
    # The slow child's checks all took the delay; the fast one's only what the machine's load
    # made of a millisecond check (once over 300 ms on a busy 2-core machine).
    assert checks[slow]["p99_ms"] >= 800 and checks[fast]["p99_ms"] < checks[slow]["p99_ms"]
    heaviest = graph["heaviest"][0]["path"]
    assert heaviest[-1] == slow and [n.split("@")[0] for n in heaviest] == [
        "ingest", "prefill", "decode", "verify"
    ]  # fmt: skip
    assert "#d62728" in (tmp_path / "paths.svg").read_text()
