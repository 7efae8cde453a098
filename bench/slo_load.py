"""SLO under load: a fixed thinking budget vs the budget controller, on the local stack.

    python bench/slo_load.py --rates 4,8,12,16,20,24 --phase-s 20
    python bench/slo_load.py --model r1-reasoner --tasks broad --slo-ms 30000 \\
        --rates 0.22,0.33,0.44,0.66,0.88,1.32 --phase-s 120
    python bench/slo_load.py --model r1-reasoner --tasks broad --capacity 48   # fixed only
    python bench/slo_load.py --model r1-reasoner --tasks broad --slo-ms 20000 \\
        --rates 0.9 --phase-s 300 --capacity-jobs-s 0.44        # an overload, 5 minutes

Goodput as DistServe defines it: the highest arrival rate at which at least 90% of jobs finish
within the SLO. Per rate, one phase of open-loop Poisson arrivals (seeded: the same job stream
in both modes), then a drain until every job of the phase has its Result (or --drain-s passes;
an unfinished job counts as infinitely late), so no phase inherits another's backlog. The
stream goes through two fresh local stacks (embedded broker + Redis, ingest / prefill / decode
/ verify workers as processes): "fixed" keeps the stamped default budget; "controller" adds the
budget worker, which publishes live limits from the Results' latencies and the queue lag (its
interactive SLO is --slo-ms: STEPWISE_SLO_MS). Jobs: held-out problems of --tasks as the model
is prompted (the tiny reasoner's line, else a chat message with the format's answer
instruction), --temperature, verification async (the Job default). Per rate: SLO attainment,
p95 end-to-end latency, accuracy, mean tokens, forced answers, jobs refused as `overloaded`
(they count as misses: attainment is of every job sent) and the attainment of the admitted
ones, jobs/s served within the SLO and correct answers within it per second; a PNG with
attainment and p95 against the rate. `--capacity N` measures what the fixed budget serves: N
jobs at once on a fixed stack, jobs/s until the last Result. `--capacity-jobs-s C` states it,
so each rate is also reported as a multiple of it. The last line is one JSON object with each
mode's `goodput`, the `goodput_ratio` (controller / fixed), `accuracy_delta_points` (the
controller's accuracy at its goodput rate minus the fixed budget's at its own) and each mode's
best `correct_per_s` (correct answers within the SLO per second at any rate).
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

from aiokafka import AIOKafkaConsumer  # noqa: E402

from pipeline import schema  # noqa: E402
from pipeline.client import StepwiseClient  # noqa: E402
from pipeline.config import PipelineConfig  # noqa: E402
from pipeline.evals import answers_match  # noqa: E402
from pipeline.evals.runner import answer_instruction  # noqa: E402
from pipeline.evals.tasks import load_problems  # noqa: E402
from pipeline.formats import format_for  # noqa: E402
from pipeline.local.demo import problem_job  # noqa: E402
from pipeline.local.stack import Stack  # noqa: E402
from pipeline.models.resolve import resolve_model  # noqa: E402
from pipeline.topics import Topics  # noqa: E402

ATTAINMENT = 0.9  # DistServe: goodput is the highest rate with >= 90% of jobs within the SLO


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


def arrivals(rate: float, phase_s: float, seed: int) -> list[float]:
    """Poisson arrival offsets (s) over one phase; a pure function of its arguments."""
    rng, t, out = random.Random(seed), 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= phase_s:
            return out
        out.append(t)


def make_job(p, i: int, args, instruction: str | None):

    params = schema.JobParams(seed=i, stream="none", temperature=args.temperature)
    job = problem_job(p, f"slo-{uuid.uuid4().hex[:8]}-{i}", params, instruction)
    job.created_ms = int(time.time() * 1000)
    return job


async def drive(bootstrap, prefix, problems, phases, drain_s, args, instruction) -> list:
    """Each phase (rate, arrival offsets, first problem index) in turn, drained before the
    next; returns (rate, problem, latency_s | inf, result | None) per job."""

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
    out = []
    async with StepwiseClient(bootstrap, prefix) as client:
        for rate, offsets, first in phases:
            sent = []
            start = time.perf_counter()
            for k, offset in enumerate(offsets):
                delay = start + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                p = problems[(first + k) % len(problems)]
                job = make_job(p, first + k, args, instruction)
                sent.append((job.id, p, time.perf_counter()))
                await client.submit(job)
            deadline = time.perf_counter() + drain_s
            while any(j not in results for j, _, _ in sent) and time.perf_counter() < deadline:
                await asyncio.sleep(0.2)
            for job_id, p, t in sent:
                got = results.get(job_id)
                out.append((rate, p, got[0] - t if got else math.inf, got[1] if got else None))
            print(f"  rate {rate}: {len(sent)} jobs, {sum(j in results for j, _, _ in sent)} done",
                  file=sys.stderr, flush=True)  # fmt: skip
    collector.cancel()
    await consumer.stop()
    return out


def refused(result) -> bool:
    """Refused at admission by the controller (an error Result `overloaded`)."""
    return result is not None and result.error is not None and result.error.code == "overloaded"


def summarize(rows, rates, slo_s, phase_s: float) -> list[dict]:

    table = []
    for rate in rates:
        mine = [r for r in rows if r[0] == rate]
        shed = [r for r in mine if refused(r[3])]
        admitted = [r for r in mine if not refused(r[3])]
        within = [r for r in admitted if r[2] <= slo_s]
        done = [r for r in admitted if r[3] is not None and r[3].status == "ok"]
        right = [r for r in done if answers_match(r[3].answer, r[1].answer)]
        right_within = [r for r in right if r[2] <= slo_s]
        lat = [r[2] for r in admitted]
        table.append(
            {
                "rate": rate,
                "jobs": len(mine),
                "shed": len(shed),
                # Refused jobs count as misses: the share of every job sent.
                "attainment": len(within) / len(mine) if mine else float("nan"),
                "attainment_admitted": len(within) / len(admitted) if admitted else float("nan"),
                "p95_s": p95(lat),  # of the admitted jobs
                "accuracy": len(right) / len(admitted) if admitted else float("nan"),
                "mean_tokens": (
                    sum(r[3].budget.used for r in done) / len(done) if done else float("nan")
                ),
                "budget_stops": sum(r[3].budget.stop_reason == "budget" for r in done),
                "deadline_cuts": sum(r[3].budget.binding == "deadline" for r in done),
                "within_per_s": len(within) / phase_s,
                "correct_per_s": len(right_within) / phase_s,
            }
        )
    return table


def goodput(table: list[dict]) -> dict | None:
    """DistServe's goodput over a sweep: the row of the highest rate whose attainment is at
    least ATTAINMENT (None: not even the lowest rate)."""
    ok = [r for r in table if r["attainment"] >= ATTAINMENT]
    return max(ok, key=lambda r: r["rate"]) if ok else None


def run_stack(mode: str, args, problems, phases, instruction) -> list[dict]:

    workers = ("ingest", "prefill", "decode", "verify")
    if mode == "controller":
        workers += ("budget",)
    log_dir = tempfile.mkdtemp(prefix=f"stepwise-slo-{mode}-")
    for name in ("STEPWISE_KAFKA", "STEPWISE_REDIS"):
        os.environ.pop(name, None)  # fresh embedded services for each mode
    os.environ["STEPWISE_SLO_MS"] = str(args.slo_ms)  # the budget worker's interactive SLO
    if args.min_thinking_tokens:
        os.environ["STEPWISE_MIN_THINKING_TOKENS"] = str(args.min_thinking_tokens)
    config = PipelineConfig.from_settings(model=args.model, dtype="float32")
    rates = [r for r, _, _ in phases]
    with Stack(config, workers=workers, log_dir=log_dir) as stack:
        bootstrap = stack.services.bootstrap_servers
        # Warm up, not measured: workers load models, groups settle, kernels get built.
        warm = [(rates[0], arrivals(rates[0], args.warmup_s, 1), 10_000)]
        asyncio.run(drive(bootstrap, config.topic_prefix, problems, warm, args.drain_s, args,
                          instruction))  # fmt: skip
        rows = asyncio.run(
            drive(bootstrap, config.topic_prefix, problems, phases, args.drain_s, args,
                  instruction)
        )  # fmt: skip
    table = summarize(rows, rates, args.slo_ms / 1000, args.phase_s)
    print(f"\n{mode} (logs: {log_dir})")
    print(f"{'rate':>6}{'xcap':>6}{'jobs':>6}{'shed':>6}{'in SLO':>8}{'admitted':>9}{'p95 s':>8}"
          f"{'acc':>7}{'tokens':>8}{'forced':>8}{'ok/s':>7}{'right/s':>8}")  # fmt: skip
    for r in table:
        xcap = r["rate"] / args.capacity_jobs_s if args.capacity_jobs_s else float("nan")
        print(
            f"{r['rate']:>6.2f}{xcap:>6.2f}{r['jobs']:>6}{r['shed']:>6}{r['attainment']:>8.1%}"
            f"{r['attainment_admitted']:>9.1%}{r['p95_s']:>8.2f}{r['accuracy']:>7.1%}"
            f"{r['mean_tokens']:>8.1f}{r['budget_stops']:>8}{r['within_per_s']:>7.3f}"
            f"{r['correct_per_s']:>8.3f}"
        )
    return table


def measure_capacity(args, problems, instruction) -> float:
    """What the fixed budget serves: `--capacity` jobs at once on a fixed stack, jobs/s from
    the first submit to the last Result."""

    for name in ("STEPWISE_KAFKA", "STEPWISE_REDIS"):
        os.environ.pop(name, None)
    config = PipelineConfig.from_settings(model=args.model, dtype="float32")
    log_dir = tempfile.mkdtemp(prefix="stepwise-slo-capacity-")
    with Stack(config, workers=("ingest", "prefill", "decode", "verify"), log_dir=log_dir) as st:
        bootstrap = st.services.bootstrap_servers
        warm = [(0.25, arrivals(0.25, args.warmup_s, 1), 10_000)]  # light: all done before
        asyncio.run(drive(bootstrap, config.topic_prefix, problems, warm, args.drain_s, args,
                          instruction))  # fmt: skip
        burst = [(0.0, [0.0] * args.capacity, 20_000)]
        start = time.perf_counter()
        rows = asyncio.run(drive(bootstrap, config.topic_prefix, problems, burst, 3600, args,
                                 instruction))  # fmt: skip
    done = [r for r in rows if r[3] is not None]
    elapsed = max(r[2] for r in done) if done else time.perf_counter() - start
    return len(done) / elapsed


def plot(fixed, ctl, slo_s, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for name, t in (("fixed budget", fixed), ("controller", ctl)):
        rates = [r["rate"] for r in t]
        a.plot(rates, [100 * r["attainment"] for r in t], marker="o", label=name)
        b.plot(rates, [min(r["p95_s"], 10 * slo_s) for r in t], marker="o", label=name)
    a.axhline(100 * ATTAINMENT, ls="--", c="red", label=f"{ATTAINMENT:.0%} (goodput bar)")
    a.set(xlabel="arrival rate (jobs/s)", ylabel="jobs within the SLO (%)")
    b.axhline(slo_s, ls="--", c="red", label="SLO")
    b.set(xlabel="arrival rate (jobs/s)", ylabel=f"p95 latency (s, capped at {10 * slo_s:g})",
          yscale="log")  # fmt: skip
    a.legend(), b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny-reasoner", help="a model name or directory")
    ap.add_argument("--tasks", default="indist", help="a task or group (indist, broad, ...)")
    ap.add_argument("--rates", default="4,8,12,16,20,24", help="jobs/s, one phase each")
    ap.add_argument("--phase-s", type=float, default=20.0)
    ap.add_argument("--warmup-s", type=float, default=5.0, help="an unmeasured first phase")
    ap.add_argument("--drain-s", type=float, default=60.0, help="wait for stragglers")
    ap.add_argument("--slo-ms", type=float, default=2000.0, help="the interactive class's SLO")
    ap.add_argument("--temperature", type=float, default=1.0, help="the Jobs' temperature")
    ap.add_argument("--modes", default="fixed,controller")
    ap.add_argument(
        "--min-thinking-tokens",
        type=int,
        default=None,
        help="the law's floor before it sheds (STEPWISE_MIN_THINKING_TOKENS)",
    )
    ap.add_argument(
        "--capacity",
        type=int,
        default=0,
        help="measure the fixed budget's capacity with this many jobs at once, only",
    )
    ap.add_argument(
        "--capacity-jobs-s",
        type=float,
        default=0.0,
        help="the fixed budget's capacity (jobs/s), to report rates against",
    )
    ap.add_argument("--plot", default=str(Path(__file__).with_name("slo_load.png")))
    args = ap.parse_args()

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    fmt = format_for(resolve_model(args.model), None)
    instruction = answer_instruction(fmt)
    rates = [float(r) for r in args.rates.split(",")]
    # Shuffled (seeded): load_problems lists a group family by family, and a phase must not
    # get one family's problems while the next gets another's (the first r1-reasoner run did:
    # the rate was confounded with the job mix).
    problems = load_problems(args.tasks, 400, 0)
    random.Random(0).shuffle(problems)
    if args.capacity:
        cap = measure_capacity(args, problems, instruction)
        print(f"fixed budget capacity: {cap:.3f} jobs/s ({args.capacity} jobs at once)")
        print(json.dumps({"bench": "slo_load", "model": args.model, "capacity_jobs_s": cap,
                          "capacity_jobs": args.capacity}))  # fmt: skip
        return 0
    phases, first = [], 0
    for i, rate in enumerate(rates):
        offsets = arrivals(rate, args.phase_s, 7 + i)
        phases.append((rate, offsets, first))
        first += len(offsets)
    tables = {m: run_stack(m, args, problems, phases, instruction) for m in args.modes.split(",")}
    slo_s = args.slo_ms / 1000
    report = {"bench": "slo_load", "model": args.model, "tasks": args.tasks, "rates": rates,
              "phase_s": args.phase_s, "slo_ms": args.slo_ms, "temperature": args.temperature,
              "capacity_jobs_s": args.capacity_jobs_s or None, **tables,
              "plot": args.plot}  # fmt: skip
    for mode, table in tables.items():
        best = goodput(table)
        report[f"{mode}_goodput"] = best["rate"] if best else 0.0
        report[f"{mode}_accuracy_at_goodput"] = best["accuracy"] if best else None
        report[f"{mode}_correct_per_s"] = max(r["correct_per_s"] for r in table)
        print(f"{mode}: goodput {report[f'{mode}_goodput']} jobs/s", end="")
        print(f", accuracy there {best['accuracy']:.1%}" if best else " (no rate met 90%)")
    if set(tables) == {"fixed", "controller"}:
        plot(tables["fixed"], tables["controller"], slo_s, args.plot)
        f, c = report["fixed_goodput"], report["controller_goodput"]
        report["goodput_ratio"] = c / f if f else (math.inf if c else None)
        fa, ca = report["fixed_accuracy_at_goodput"], report["controller_accuracy_at_goodput"]
        if fa is not None and ca is not None:
            report["accuracy_delta_points"] = 100 * (ca - fa)
        print(f"goodput ratio {report['goodput_ratio']}, accuracy delta "
              f"{report.get('accuracy_delta_points')} points; plot: {args.plot}")  # fmt: skip
        fc, cc = report["fixed_correct_per_s"], report["controller_correct_per_s"]
        report["correct_per_s_ratio"] = cc / fc if fc else None
        print(f"correct answers within the SLO per second, best rate: fixed {fc:.3f}, "
              f"controller {cc:.3f}")  # fmt: skip
        if args.capacity_jobs_s:
            for table in tables.values():
                for r in table:
                    r["within_over_capacity"] = r["within_per_s"] / args.capacity_jobs_s
    if max(rates) <= min(report.get(f"{m}_goodput", 0.0) for m in tables):
        print("every mode met the SLO at the highest rate: raise --rates")
    print(json.dumps(finite(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
