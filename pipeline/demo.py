"""`stepwise demo`: held-out problems through the running pipeline, then a summary table."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from collections import Counter

from pipeline import schema
from pipeline.client import StepwiseClient
from pipeline.evals import answers_match
from pipeline.evals.tasks import load_problems


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def run_demo(kafka: str, prefix: str, n: int, seed: int, show: int = 1) -> dict:
    from tqdm import tqdm

    problems = load_problems("indist", n, seed)
    tag = uuid.uuid4().hex[:6]
    jobs = {
        f"demo-{tag}-{i}": (
            p,
            schema.Job(
                id=f"demo-{tag}-{i}",
                prompt=" ".join(p.question.split()),
                premises=list(p.premises),
                params=schema.JobParams(temperature=0.7, seed=seed + i, max_tokens=512),
            ),
        )
        for i, p in enumerate(problems)
    }
    results: dict[str, schema.Result] = {}
    shown: list[str] = []
    t0 = time.perf_counter()
    async with StepwiseClient(kafka, prefix) as client:
        await client.submit_many([job for _, job in jobs.values()])
        with tqdm(total=len(jobs), desc="jobs", unit="job", file=sys.stderr) as bar:
            async for msg in client.follow(set(jobs), timeout_s=600):
                if isinstance(msg, schema.Result):
                    results[msg.id] = msg
                    bar.update(1)
                elif len(shown) < 16 and msg.id in list(jobs)[:show]:
                    if msg.kind == "step":
                        shown.append(f"  step {msg.step}: {msg.text}")
                    elif msg.kind == "verdict":
                        why = f": {msg.detail}" if msg.detail else ""
                        shown.append(f"      {msg.verdict}{why}")
                    elif msg.kind == "backtrack":
                        shown.append(f"  <- backtrack: {msg.detail}")
    wall = time.perf_counter() - t0
    ok = [r for r in results.values() if r.status == "ok"]
    correct = sum(answers_match(r.answer, jobs[r.id][0].answer) for r in ok)
    e2e = [float(r.timings.e2e_ms) for r in ok if r.timings.e2e_ms is not None]
    tokens = [r.usage.completion_tokens for r in ok]
    verdicts = Counter(s.verdict for r in ok for s in r.steps)
    first = next(iter(jobs.values()))
    return {
        "jobs": len(jobs),
        "ok": len(ok),
        "accuracy": correct / len(jobs) if jobs else 0.0,
        "e2e_ms_p50": _pct(e2e, 0.5),
        "e2e_ms_p95": _pct(e2e, 0.95),
        "e2e_ms_p99": _pct(e2e, 0.99),
        "mean_completion_tokens": statistics.fmean(tokens) if tokens else 0.0,
        "jobs_per_s": len(ok) / wall,
        "tokens_per_s": sum(tokens) / wall,
        "wall_s": wall,
        "backtracks": sum(r.usage.backtracks for r in ok),
        "wasted_tokens": sum(r.usage.wasted_tokens for r in ok),
        "gave_up": sum(r.budget.stop_reason == "unverified" for r in ok),
        "verdicts": dict(verdicts),
        "sample_question": first[0].question,
        "sample_gold": first[0].answer,
        "sample_steps": shown,
    }


def print_report(r: dict) -> None:
    print(f"\nsample: {r['sample_question']}  (gold: {r['sample_gold']})")
    for line in r["sample_steps"]:
        print(line)
    print()
    rows = [
        ("jobs (ok / sent)", f"{r['ok']} / {r['jobs']}"),
        ("answer accuracy", f"{r['accuracy']:.1%}"),
        (
            "e2e latency p50 / p95 / p99",
            f"{r['e2e_ms_p50']:.0f} / {r['e2e_ms_p95']:.0f} / {r['e2e_ms_p99']:.0f} ms",
        ),
        ("mean completion tokens", f"{r['mean_completion_tokens']:.1f}"),
        ("throughput", f"{r['jobs_per_s']:.2f} jobs/s, {r['tokens_per_s']:.1f} tokens/s"),
        ("wall time", f"{r['wall_s']:.1f} s"),
        ("step verdicts", ", ".join(f"{k} {v}" for k, v in sorted(r["verdicts"].items()))),
        (
            "backtracks / wasted tokens / gave up",
            f"{r['backtracks']} / {r['wasted_tokens']} / {r['gave_up']}",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def main(n: int, seed: int, model: str, reasoning_format: str | None = None) -> int:
    import os

    from pipeline.config import PipelineConfig
    from pipeline.stack import Stack

    kafka = os.environ.get("STEPWISE_KAFKA")
    prefix = os.environ.get("STEPWISE_TOPIC_PREFIX", "stepwise.")
    if kafka:  # a running pipeline (`stepwise up` elsewhere, or compose)
        report = asyncio.run(run_demo(kafka, prefix, n, seed))
    else:
        print("starting a local pipeline (embedded broker + Redis + workers) ...", file=sys.stderr)
        import tempfile

        log_dir = tempfile.mkdtemp(prefix="stepwise-demo-")
        fmt = {"reasoning_format": reasoning_format} if reasoning_format else {}
        with Stack(PipelineConfig.from_env(model=model, **fmt), log_dir=log_dir) as stack:
            for line in stack.describe():
                print("  " + line, file=sys.stderr)
            report = asyncio.run(run_demo(stack.services.bootstrap_servers, prefix, n, seed))
    print_report(report)
    return 0 if report["ok"] == report["jobs"] else 1
