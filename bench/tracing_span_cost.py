"""What tracing one job costs in CPU, measured in one process: every span a traced job makes
(submit, ingest with its two cache lookups, prefill, decode with its KV import, ten steps and
their events, three verify checks), their context through Kafka and Celery headers, the caller
edges recorded as metrics, and their export to the local span store; against the same calls
with tracing off (the no-op path every untraced job takes) in the same run.

    python bench/tracing_span_cost.py [--jobs 400] [--pipeline-cpu-ms 35]

`--pipeline-cpu-ms`: the CPU one job costs the whole pipeline (bench/pipeline_overhead.py's
`pipeline_cpu_s` / n: about 35 ms for the tiny reasoner here); the cost of tracing at a sampling
rate is then (traced - off) * rate / that. Throughput runs on this 2-core machine swing by
+-15% between identical runs (bench/tracing_overhead.py), far more than the effect; this says
how big the effect is. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.decode.job_trace import JobTrace  # noqa: E402
from pipeline.decode.messages import TraceMark  # noqa: E402
from pipeline.tracing import setup, spans  # noqa: E402

STEPS, CHECKS = 10, 3


def one_job(i: int) -> None:
    """The span calls of one job, as the stages make them (each stage in this one process)."""
    job = f"job-{i}"
    submit = spans.start_job_span("submit", job, tenant="t")
    headers = spans.kafka_headers_of(submit)
    spans.end(submit, outcome="published")
    ingest = spans.start_job_span("ingest", job, headers, tenant="t")
    for level in ("answer", "prefix"):
        with spans.child(ingest, "cache.lookup", level=level) as lookup:
            lookup.set_attribute("stepwise.hit", False)
    headers = spans.kafka_headers_of(ingest)
    spans.end(ingest, outcome="admitted", routed=False)
    prefill = spans.start_job_span("prefill", job, headers)
    prefill.set_attribute("stepwise.batch_size", 16)
    headers = spans.kafka_headers_of(prefill)
    spans.end(prefill, outcome="handed_off")
    decode = spans.start_job_span("decode", job, headers)
    trace = JobTrace(decode)
    now = time.time_ns()
    trace.apply(TraceMark(job, "kv_import", now, -1, now - 1000, {"transport": "shm_pool",
                                                                  "bytes": 4096}))  # fmt: skip
    for step in range(STEPS):
        trace.apply(TraceMark(job, "step", time.time_ns(), step, 0, {"chars": 80}))
        if step < CHECKS:
            check = spans.start_job_span(
                "verify", job, spans.headers_of(trace.parent_of_check(step)), root=False
            )
            spans.end(check, step=step, verdict="entailed", solver_ms=1.0)
            trace.apply(TraceMark(job, "verdict", time.time_ns(), step, 0, {"verdict": "ok"}))
    if trace.span.is_recording():
        spans.end(trace.span, status="ok", steps=STEPS)


def cpu_per_job_us(jobs: int) -> float:
    t0 = time.process_time()
    for i in range(jobs):
        one_job(i)
    setup.flush()  # the export's work counts (it runs on the exporter's thread)
    return (time.process_time() - t0) / jobs * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--pipeline-cpu-ms", type=float, default=35.0)
    args = ap.parse_args()
    setup.shutdown()
    cpu_per_job_us(50)  # warm the imports and the no-op path
    off = cpu_per_job_us(args.jobs)
    with tempfile.TemporaryDirectory() as d:
        setup.init_tracing("bench", 1.0, d)
        cpu_per_job_us(50)  # warm
        on = cpu_per_job_us(args.jobs)
        lines = sum(1 for p in Path(d).glob("*.jsonl") for _ in p.open())
        setup.shutdown()
    added_ms = (on - off) / 1000
    cost = {rate: added_ms * rate / args.pipeline_cpu_ms for rate in (0.01, 1.0)}
    print(f"one job's span calls, tracing off: {off:8.1f} us of CPU")
    print(f"one job's span calls, traced:      {on:8.1f} us of CPU "
          f"({lines / (args.jobs + 50):.0f} spans a job)")  # fmt: skip
    print(
        f"added per traced job: {added_ms:.3f} ms, against {args.pipeline_cpu_ms:.0f} ms of "
        f"pipeline CPU a job: {cost[1.0]:.2%} at 100% sampling, {cost[0.01]:.4%} at 1%"
    )
    figures = {
        "bench": "tracing_span_cost", "jobs": args.jobs, "off_us": round(off, 2),
        "traced_us": round(on, 2), "added_ms": round(added_ms, 4),
        "pipeline_cpu_ms": args.pipeline_cpu_ms, "cost_at_100": round(cost[1.0], 5),
        "cost_at_1": round(cost[0.01], 7),
    }  # fmt: skip
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
