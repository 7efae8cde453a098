"""SLO under load: a fixed thinking budget vs the budget controller, on the local stack.

    python bench/slo_load.py --rates 4,8,12,16,20,24 --phase-s 20

Open-loop Poisson arrivals (seeded) step through increasing rates; the same job stream (held-out
tiny-reasoner problems, default Job parameters: T = 1.0, verification async) goes through two
fresh local stacks (embedded broker + Redis, ingest / prefill / decode / verify workers as
processes): "fixed" keeps the stamped default budget; "controller" adds the budget worker, which
publishes live limits from the Results' latencies and the queue lag. Per rate: goodput (jobs/s
finishing within the SLO), p95 end-to-end latency (a job still unfinished when the run drains
counts as infinitely late), accuracy; a PNG plot. Then early exit, on the engine directly:
tokens saved at equal accuracy. The last line is one JSON object with `goodput_ratio` and
`accuracy_delta_points` (controller vs fixed, at the first rate where the fixed budget's p95
breaks the SLO) and `early_exit_token_saving`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def finite(obj):
    """JSON has no infinity: unfinished latencies become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def p95(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


async def drive(bootstrap: str, prefix: str, problems, rates, phase_s, drain_s, seed) -> list:
    """Submit the arrival schedule; returns (rate, problem, submit_s, latency_s | inf, result)."""
    from aiokafka import AIOKafkaConsumer

    from pipeline import schema
    from pipeline.client import StepwiseClient
    from pipeline.topics import Topics

    rng = random.Random(seed)
    schedule = []  # (time offset, rate)
    t0 = 0.0
    for rate in rates:
        t = t0
        while True:
            t += rng.expovariate(rate)
            if t >= t0 + phase_s:
                break
            schedule.append((t, rate))
        t0 += phase_s
    topics = Topics(prefix)
    results: dict[str, tuple[float, schema.Result]] = {}
    consumer = AIOKafkaConsumer(
        topics.results, bootstrap_servers=bootstrap, group_id=f"slo-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="latest", enable_auto_commit=False, fetch_max_wait_ms=10,
    )  # fmt: skip
    await consumer.start()
    while not consumer.assignment():  # joined: later Results are seen
        await asyncio.sleep(0.1)
    for tp in consumer.assignment():
        await consumer.position(tp)

    async def collect() -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.perf_counter()
            for records in batch.values():
                for r in records:
                    res = schema.decode(r.value, schema.Result)
                    results.setdefault(res.id, (now, res))

    collector = asyncio.create_task(collect())
    jobs = []
    async with StepwiseClient(bootstrap, prefix) as client:
        start = time.perf_counter()
        for i, (offset, rate) in enumerate(schedule):
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            p = problems[i % len(problems)]
            job = schema.Job(
                id=f"slo-{uuid.uuid4().hex[:8]}-{i}",
                prompt=" ".join(p.question.split()),
                premises=list(p.premises),
                params=schema.JobParams(seed=i, stream="none"),
                created_ms=int(time.time() * 1000),
            )
            jobs.append((job.id, rate, p, time.perf_counter()))
            await client.submit(job)
        deadline = time.perf_counter() + drain_s
        while len(results) < len(jobs) and time.perf_counter() < deadline:
            await asyncio.sleep(0.2)
    collector.cancel()
    await consumer.stop()
    out = []
    for job_id, rate, p, sent in jobs:
        got = results.get(job_id)
        out.append((rate, p, sent, got[0] - sent if got else math.inf, got[1] if got else None))
    return out


def summarize(rows, rates, phase_s, slo_s) -> list[dict]:
    from pipeline.evals import answers_match

    table = []
    for rate in rates:
        mine = [r for r in rows if r[0] == rate]
        lat = [r[3] for r in mine]
        done = [r for r in mine if r[4] is not None and r[4].status == "ok"]
        right = sum(answers_match(r[4].answer, r[1].answer) for r in done)
        table.append(
            {
                "rate": rate,
                "jobs": len(mine),
                "goodput": sum(x <= slo_s for x in lat) / phase_s,
                "p95_s": p95(lat),
                "accuracy": right / len(done) if done else float("nan"),
                "mean_tokens": (
                    sum(r[4].budget.used for r in done) / len(done) if done else float("nan")
                ),
                "budget_stops": sum(r[4].budget.stop_reason == "budget" for r in done),
            }
        )
    return table


def run_stack(mode: str, args, problems, rates) -> list[dict]:
    from pipeline.config import PipelineConfig
    from pipeline.stack import Stack

    workers = ("ingest", "prefill", "decode", "verify")
    if mode == "controller":
        workers += ("budget",)
    log_dir = tempfile.mkdtemp(prefix=f"stepwise-slo-{mode}-")
    for name in ("STEPWISE_KAFKA", "STEPWISE_REDIS"):
        os.environ.pop(name, None)  # fresh embedded services for each mode
    config = PipelineConfig.from_env(model="tiny-reasoner", dtype="float32")
    with Stack(config, workers=workers, log_dir=log_dir) as stack:
        bootstrap = stack.services.bootstrap_servers
        # Warm up: a short low-rate phase, not measured (workers load models, groups settle).
        asyncio.run(drive(bootstrap, config.topic_prefix, problems, [2.0], 5.0, 60.0, 1))
        rows = asyncio.run(
            drive(bootstrap, config.topic_prefix, problems, rates, args.phase_s, args.drain_s, 7)
        )
    table = summarize(rows, rates, args.phase_s, args.slo_ms / 1000)
    print(f"\n{mode} (logs: {log_dir})")
    print(f"{'rate':>6}{'jobs':>6}{'goodput':>9}{'p95 s':>8}{'acc':>7}{'tokens':>8}{'forced':>8}")
    for r in table:
        print(
            f"{r['rate']:>6.1f}{r['jobs']:>6}{r['goodput']:>9.2f}{r['p95_s']:>8.2f}"
            f"{r['accuracy']:>7.1%}{r['mean_tokens']:>8.1f}{r['budget_stops']:>8}"
        )
    return table


def early_exit_saving(n: int) -> dict:
    """Tokens per problem with and without early exit (verify off), same problems and seeds."""
    import torch
    from early_exit import run  # bench/early_exit.py: the policy sweep this is one row of

    torch.set_num_threads(1)
    out = {"off": run(n, "off", None, 1.0), "early_exit": run(n, "off", (2, None), 1.0)}
    off, ee = out["off"], out["early_exit"]
    out["token_saving"] = 1 - ee["mean_tokens"] / off["mean_tokens"]
    out["accuracy_delta_points"] = 100 * (ee["accuracy"] - off["accuracy"])
    print(
        f"\nearly exit (engine, {n} problems, T=1.0): tokens {off['mean_tokens']:.1f} -> "
        f"{ee['mean_tokens']:.1f} ({out['token_saving']:+.1%}, probes {ee['probe_tokens']:.1f}/"
        f"problem, {ee['exits']} exits), accuracy {off['accuracy']:.1%} -> {ee['accuracy']:.1%}"
    )
    return out


def plot(fixed, ctl, slo_s, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for name, t in (("fixed budget", fixed), ("controller", ctl)):
        rates = [r["rate"] for r in t]
        a.plot(rates, [r["goodput"] for r in t], marker="o", label=name)
        b.plot(rates, [min(r["p95_s"], 60) for r in t], marker="o", label=name)
    a.plot(rates, rates, ls=":", c="grey", label="offered")
    a.set(xlabel="offered rate (jobs/s)", ylabel="goodput (jobs/s within SLO)")
    b.axhline(slo_s, ls="--", c="red", label="SLO")
    b.set(xlabel="offered rate (jobs/s)", ylabel="p95 latency (s, capped at 60)", yscale="log")
    a.legend(), b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rates", default="4,8,12,16,20,24", help="jobs/s, one phase each")
    ap.add_argument("--phase-s", type=float, default=20.0)
    ap.add_argument("--drain-s", type=float, default=60.0, help="wait for stragglers")
    ap.add_argument("--slo-ms", type=float, default=2000.0, help="the interactive class's SLO")
    ap.add_argument("--early-exit-n", type=int, default=500)
    ap.add_argument("--plot", default=str(Path(__file__).with_name("slo_load.png")))
    args = ap.parse_args()
    from pipeline.evals.tasks import load_problems

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rates = [float(r) for r in args.rates.split(",")]
    problems = load_problems("indist", 400, 0)
    fixed = run_stack("fixed", args, problems, rates)
    ctl = run_stack("controller", args, problems, rates)
    slo_s = args.slo_ms / 1000
    plot(fixed, ctl, slo_s, args.plot)
    broken = next((i for i, r in enumerate(fixed) if r["p95_s"] > slo_s), None)
    report = {"bench": "slo_load", "rates": rates, "phase_s": args.phase_s, "slo_ms": args.slo_ms,
              "fixed": fixed, "controller": ctl, "plot": args.plot}  # fmt: skip
    if broken is None:
        print("\nthe fixed budget never broke the SLO: raise --rates")
        report.update(goodput_ratio=None, accuracy_delta_points=None)
    else:
        f, c = fixed[broken], ctl[broken]
        report["break_rate"] = f["rate"]
        report["goodput_ratio"] = c["goodput"] / f["goodput"] if f["goodput"] else math.inf
        report["accuracy_delta_points"] = 100 * (c["accuracy"] - f["accuracy"])
        print(
            f"\nat {f['rate']} jobs/s (fixed p95 {f['p95_s']:.2f} s > SLO): controller p95 "
            f"{c['p95_s']:.2f} s, goodput {c['goodput']:.2f} vs {f['goodput']:.2f} jobs/s "
            f"(ratio {report['goodput_ratio']:.2f}), accuracy {c['accuracy']:.1%} vs "
            f"{f['accuracy']:.1%}"
        )
    ee = early_exit_saving(args.early_exit_n)
    report["early_exit"] = ee
    report["early_exit_token_saving"] = ee["token_saving"]
    print(f"plot: {args.plot}")
    print(json.dumps(finite(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
