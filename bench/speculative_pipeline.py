"""Speculative decoding through the whole pipeline: job latency with and without it.

    python bench/speculative_pipeline.py --model r1-reasoner --tasks broad --n 8 \\
        --concurrency 1 --rounds 5
    python bench/speculative_pipeline.py --concurrency 4 --n 8 --speculative-config \\
        '{"method": "ngram"}'

Each side is a fresh local stack as `stepwise up` starts it (embedded broker and Redis, ingest /
prefill / decode processes, a Celery verify worker), decode with `--speculative-config` (side
"on") or without it ("off"); the sides alternate round by round (off first in odd rounds). On
each stack one untimed job warms the workers, then `--n` held-out problems of `--tasks` go in
as chat messages with verification async, `--concurrency` jobs in flight at a time (closed
loop: a job is sent as one finishes). A job's latency runs from its submit to its Result, as
a client sees it (the warm-up's output and each finished job's stay in the tenant's suffix
store, as in serving). Decode's Prometheus counters give the speculating side's acceptance and
tokens per forward (over the batch). Per side and round: p50 / p95 latency, tokens per second
of the run (completion + discarded tokens over the wall time), backtracks, accuracy; per round
the ratios off / on p50 and on / off tokens/s, and how many jobs got the same text on both
sides (async verdicts arrive when the checker gets to them, so a rollback may land a token
earlier or later: the texts need not match through the pipeline, as they must in the engine).
Medians and spreads over the rounds; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import schema, settings  # noqa: E402
from pipeline.client import StepwiseClient  # noqa: E402
from pipeline.config import PipelineConfig, SpeculativeConfig  # noqa: E402
from pipeline.evals import answers_match  # noqa: E402
from pipeline.evals.runner import answer_instruction  # noqa: E402
from pipeline.evals.tasks import load_problems  # noqa: E402
from pipeline.formats import format_for  # noqa: E402
from pipeline.local.demo import problem_job  # noqa: E402
from pipeline.local.stack import Stack  # noqa: E402
from pipeline.models.resolve import resolve_model  # noqa: E402

SPEC_ENV = "STEPWISE_SPECULATIVE_CONFIG"
DEFAULT_SPEC = '{"method": "suffix", "suffix_decoding_max_spec_factor": 4}'


def make_jobs(problems, args, instruction: str | None, tag: str) -> list[schema.Job]:
    """The same problems, prompts and seeds on both sides (ids differ: each run its own)."""
    return [
        problem_job(
            p,
            f"specpipe-{tag}-{i}",
            schema.JobParams(
                temperature=args.temperature,
                seed=args.seed + i,
                max_tokens=args.max_tokens,
                verify="async",
                stream="none",
            ),
            instruction,
        )  # fmt: skip
        for i, p in enumerate(problems)
    ]


async def closed_loop(
    bootstrap: str, prefix: str, jobs: list[schema.Job], concurrency: int, timeout_s: float
) -> tuple[dict[str, float], dict[str, schema.Result], float]:
    """Send `jobs` keeping `concurrency` in flight; each job's latency (submit -> Result)."""
    sent: dict[str, float] = {}
    latency: dict[str, float] = {}
    results: dict[str, schema.Result] = {}
    queue = list(jobs)
    t0 = time.perf_counter()
    async with StepwiseClient(bootstrap, prefix, events=False) as client:

        async def send_next() -> None:
            job = queue.pop(0)
            sent[job.id] = time.perf_counter()
            await client.submit(job)

        for _ in range(min(concurrency, len(queue))):
            await send_next()
        async for msg in client.follow({j.id for j in jobs}, timeout_s=timeout_s):
            if not isinstance(msg, schema.Result) or msg.id in results:
                continue
            results[msg.id] = msg
            latency[msg.id] = time.perf_counter() - sent[msg.id]
            if queue:
                await send_next()
    return latency, results, time.perf_counter() - t0


# Decode's counters (docs/telemetry.md), read before and after the timed jobs.
SERIES = {
    "proposed": "stepwise_spec_decode_num_draft_tokens_total",
    "accepted": "stepwise_spec_decode_num_accepted_tokens_total",
    "forwards": "stepwise_engine_forwards_total",
    "generated": "stepwise_engine_generated_tokens_total",
}


def decode_counts(log_dir: Path) -> dict[str, float]:
    """SERIES from the decode worker's /metrics (its port, as it logged it at start-up)."""
    log = (log_dir / "decode.log").read_text(errors="replace")
    ports = re.findall(r"decode: serving /metrics on port (\d+)", log)
    if not ports:
        return dict.fromkeys(SERIES, 0.0)
    with urllib.request.urlopen(f"http://127.0.0.1:{ports[-1]}/metrics", timeout=5) as r:
        text = r.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:  # every label set of a series, summed
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return {key: totals.get(name, 0.0) for key, name in SERIES.items()}


def text_hash(result: schema.Result | None) -> str:
    text = (
        "" if result is None else "\x1e".join(s.text for s in result.steps) + (result.content or "")
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_side(side: str, args, problems, instruction, spec_json: str) -> dict:
    """One fresh stack, decode speculating (`on`) or not (`off`); the jobs through it."""
    for name in ("STEPWISE_KAFKA", "STEPWISE_REDIS"):
        os.environ.pop(name, None)  # fresh embedded services for each side
    if side == "on":
        os.environ[SPEC_ENV] = spec_json
    else:
        os.environ.pop(SPEC_ENV, None)
    settings.install(None)  # the workers' environment is written from the settings
    config = PipelineConfig.from_settings(model=args.model, dtype=args.dtype)
    log_dir = tempfile.mkdtemp(prefix=f"stepwise-specpipe-{side}-")
    workers = ("ingest", "prefill", "decode", "verify")
    with Stack(config, workers=workers, log_dir=log_dir) as stack:
        bootstrap = stack.services.bootstrap_servers
        warm = make_jobs(problems[-1:], args, instruction, f"warm-{uuid.uuid4().hex[:6]}")
        asyncio.run(stack.guard(closed_loop(bootstrap, config.topic_prefix, warm, 1,
                                            args.timeout)))  # fmt: skip
        jobs = make_jobs(problems[: args.n], args, instruction, uuid.uuid4().hex[:6])
        before = decode_counts(Path(log_dir))
        latency, results, wall = asyncio.run(
            stack.guard(
                closed_loop(bootstrap, config.topic_prefix, jobs, args.concurrency, args.timeout)
            )
        )
        counts = {k: v - before[k] for k, v in decode_counts(Path(log_dir)).items()}
    ok = [results[j.id] for j in jobs if results[j.id].status == "ok"]
    tokens = sum(r.usage.completion_tokens + r.usage.wasted_tokens for r in ok)
    lat = [latency[j.id] for j in jobs]
    return {
        "side": side,
        "ok": len(ok),
        "p50_s": statistics.median(lat),
        "p95_s": percentile(lat, 0.95),
        "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "wall_s": wall,
        "backtracks": sum(r.usage.backtracks for r in ok),
        "acceptance": counts["accepted"] / counts["proposed"] if counts["proposed"] else None,
        "tokens_per_forward": (
            counts["generated"] / counts["forwards"] if counts["forwards"] else None
        ),
        "accuracy": sum(answers_match(results[j.id].answer, p.answer)
                        for j, p in zip(jobs, problems, strict=False)) / len(jobs),
        "texts": [text_hash(results.get(j.id)) for j in jobs],
        "logs": log_dir,
    }  # fmt: skip


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="r1-reasoner", help="a model name or directory")
    ap.add_argument("--tasks", default="broad", help="a task or group (indist, broad, ...)")
    ap.add_argument("--n", type=int, default=4, help="held-out problems a side and round")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=1, help="jobs in flight (closed loop)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-tokens", type=int, default=768, help="budget, discards included")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--timeout", type=float, default=1800.0, help="s, for one side's jobs")
    ap.add_argument(
        "--speculative-config",
        default=DEFAULT_SPEC,
        help="decode's vLLM-style JSON on side `on` (default: %(default)s)",
    )
    args = ap.parse_args()
    if args.n < 1 or args.concurrency < 1 or args.rounds < 1:
        ap.error("--n, --concurrency and --rounds must be at least 1")
    try:
        SpeculativeConfig.from_json(args.speculative_config)
    except ValueError as exc:
        ap.error(str(exc))

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    instruction = answer_instruction(format_for(resolve_model(args.model), None))
    # One more than --n: the last warms each stack up, never timed.
    problems = load_problems(args.tasks, args.n + 1, args.seed)
    rounds = []
    for r in range(args.rounds):
        order = ("off", "on") if r % 2 == 0 else ("on", "off")
        sides = {s: run_side(s, args, problems, instruction, args.speculative_config)
                 for s in order}  # fmt: skip
        off, on = sides["off"], sides["on"]
        row = {
            "round": r + 1,
            "off": off,
            "on": on,
            "p50_ratio": off["p50_s"] / on["p50_s"],
            "tps_ratio": on["tokens_per_s"] / off["tokens_per_s"],
            "same_texts": sum(a == b for a, b in zip(off["texts"], on["texts"], strict=True)),
        }
        rounds.append(row)
        print(
            f"round {r + 1}: p50 off {off['p50_s']:.1f} s / on {on['p50_s']:.1f} s "
            f"= {row['p50_ratio']:.2f}x lower; tok/s off {off['tokens_per_s']:.1f} / on "
            f"{on['tokens_per_s']:.1f} = {row['tps_ratio']:.2f}x; same texts "
            f"{row['same_texts']}/{args.n}; accuracy {off['accuracy']:.0%} / {on['accuracy']:.0%}"
            f"; acceptance {on['acceptance'] or 0:.0%}, tokens/forward "
            f"{on['tokens_per_forward'] or 0:.2f}",
            flush=True,
        )
    med = {
        f"{s}_{k}": statistics.median(row[s][k] for row in rounds)
        for s in ("off", "on")
        for k in ("p50_s", "p95_s", "tokens_per_s", "accuracy", "backtracks")
    }
    for k in ("acceptance", "tokens_per_forward"):
        got = [row["on"][k] for row in rounds if row["on"][k] is not None]
        med[f"on_{k}"] = statistics.median(got) if got else None
    print(f"\n{args.model}, {args.tasks}, n {args.n}, concurrency {args.concurrency}, "
          f"{args.rounds} rounds, spec {args.speculative_config}")  # fmt: skip
    print(f"p50 latency off / on: {spread([r['p50_ratio'] for r in rounds])} "
          f"(off {med['off_p50_s']:.1f} s, on {med['on_p50_s']:.1f} s)")  # fmt: skip
    print(f"tokens/s on / off:    {spread([r['tps_ratio'] for r in rounds])} "
          f"(off {med['off_tokens_per_s']:.1f}, on {med['on_tokens_per_s']:.1f}); acceptance "
          f"{med['on_acceptance'] or 0:.0%}, tokens/forward {med['on_tokens_per_forward'] or 0:.2f}"
          )  # fmt: skip
    print(json.dumps({
        "bench": "speculative_pipeline", "model": args.model, "tasks": args.tasks, "n": args.n,
        "concurrency": args.concurrency, "speculative_config": args.speculative_config,
        "p50_ratio": statistics.median(r["p50_ratio"] for r in rounds),
        "tps_ratio": statistics.median(r["tps_ratio"] for r in rounds),
        **med, "rounds": rounds,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
