"""A real chat model through the whole local stack, with verification on: what is checked.

    python bench/real_model_stack.py [--model smollm2] [--n 60] [--verify async] [--seed 0]

Starts the stack as `stepwise up` does (embedded broker and Redis, ingest / prefill / decode
processes, a Celery verify worker), sends `--n` word problems from the task generators as
chat messages (the question and the eval runner's answer instruction), and reads every event
and Result. Prints the step and claim verdict mix, backtracks, accuracy (the format's answer
against the gold), throughput, and whether each Result's coverage figures match its events
(checks, claims, entailed, contradicted). Side by side: the same jobs with `--verify off`
when `--compare` is given. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import schema  # noqa: E402
from pipeline.client import StepwiseClient  # noqa: E402
from pipeline.config import PipelineConfig  # noqa: E402
from pipeline.evals import answers_match  # noqa: E402
from pipeline.evals.runner import PLAIN_INSTRUCTION  # noqa: E402
from pipeline.evals.tasks import load_problems  # noqa: E402
from pipeline.local.demo import problem_job  # noqa: E402
from pipeline.local.stack import Stack  # noqa: E402


def jobs_for(problems, verify: str, seed: int, max_tokens: int) -> list[schema.Job]:
    tag = uuid.uuid4().hex[:6]
    return [
        problem_job(
            p,
            f"real-{tag}-{i}",
            schema.JobParams(temperature=0.7, seed=seed + i, max_tokens=max_tokens, verify=verify),
            PLAIN_INSTRUCTION,
        )  # fmt: skip
        for i, p in enumerate(problems)
    ]


async def run(kafka: str, prefix: str, jobs: list[schema.Job], timeout_s: float):
    events: dict[str, list[schema.Event]] = {j.id: [] for j in jobs}
    results: dict[str, schema.Result] = {}
    t0 = time.perf_counter()
    async with StepwiseClient(kafka, prefix) as client:
        await client.submit_many(jobs)
        async for msg in client.follow(set(events), timeout_s=timeout_s):
            if isinstance(msg, schema.Result):
                results[msg.id] = msg
            else:
                events[msg.id].append(msg)
    return events, results, time.perf_counter() - t0


def coverage_matches(result: schema.Result, events: list[schema.Event]) -> bool:
    v = result.verification
    verdicts = [e for e in events if e.kind == "verdict"]
    claims = [c for e in verdicts for c in e.claims]
    return v is not None and (v.checks, v.claims, v.entailed, v.contradicted) == (
        len(verdicts),
        len(claims),
        sum(c.verdict == "entailed" for c in claims),
        sum(c.verdict == "contradicted" for c in claims),
    )


def summarize(problems, jobs, events, results, wall: float) -> dict:
    gold = {j.id: p.answer for p, j in zip(problems, jobs, strict=True)}
    ok = [r for r in results.values() if r.status == "ok"]
    claims = Counter(
        c.verdict for evs in events.values() for e in evs if e.kind == "verdict" for c in e.claims
    )
    steps = Counter(
        e.verdict for evs in events.values() for e in evs if e.kind == "verdict" and e.verdict
    )
    tokens = sum(r.usage.completion_tokens + r.usage.wasted_tokens for r in ok)
    return {
        "jobs": len(jobs),
        "ok": len(ok),
        "accuracy": sum(answers_match(r.answer, gold[r.id]) for r in ok) / len(jobs),
        "answered": sum(r.answer is not None for r in ok),
        "content_nonempty": sum(bool((r.content or "").strip()) for r in ok),
        "step_verdicts": dict(steps),
        "claim_verdicts": dict(claims),
        "backtracks": sum(r.usage.backtracks for r in ok),
        # resamples (a backtrack event with a verdict): cuts are not in usage.backtracks
        "backtrack_events": sum(
            e.kind == "backtrack" and bool(e.verdict) for evs in events.values() for e in evs
        ),
        "gave_up": sum(r.budget.stop_reason == "unverified" for r in ok),
        "coverage_status": dict(Counter(r.verification.status for r in ok if r.verification)),
        "coverage_matches_events": sum(coverage_matches(r, events[r.id]) for r in ok),
        "empty_steps": sum(not s.text.strip() for r in ok for s in r.steps),
        "tokens_per_s": tokens / wall,
        "jobs_per_s": len(ok) / wall,
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verify", default="async", choices=("async", "strict"))
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--compare", action="store_true", help="also run the jobs with verify off")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()

    problems = load_problems("word", args.n, args.seed)
    config = PipelineConfig.from_settings(model=args.model)
    sides = [args.verify, *(["off"] if args.compare else [])]
    out: dict = {"bench": "real_model_stack", "model": args.model, "n": args.n}
    with Stack(config, log_dir=tempfile.mkdtemp(prefix="stepwise-real-")) as stack:
        kafka = stack.services.bootstrap_servers
        for verify in sides:
            jobs = jobs_for(problems, verify, args.seed, args.max_tokens)
            events, results, wall = asyncio.run(run(kafka, config.topic_prefix, jobs, args.timeout))
            s = summarize(problems, jobs, events, results, wall)
            out[verify] = s
            print(f"\n== verify {verify}: {s['ok']}/{s['jobs']} ok, accuracy {s['accuracy']:.1%}")
            for key in ("step_verdicts", "claim_verdicts", "backtracks", "backtrack_events",
                        "gave_up", "coverage_status", "coverage_matches_events",
                        "content_nonempty", "empty_steps", "tokens_per_s"):  # fmt: skip
                print(f"  {key:<24} {s[key]}")
    if args.compare:
        on, off = out[args.verify], out["off"]
        print(
            f"\naccuracy {on['accuracy']:.1%} ({args.verify}) vs {off['accuracy']:.1%} (off); "
            f"tokens/s ratio {on['tokens_per_s'] / off['tokens_per_s']:.2f}"
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
