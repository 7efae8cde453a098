"""Verification quality and cost: verify off / async / strict, side by side, one run.

    python bench/verify_quality.py --n 500 --seed 0

The same problems, prompts and sampling seeds in every mode; one fresh engine per mode (so no
mode profits from another's prefix cache), after one untimed warm-up pass; one engine thread,
with the checker in one separate process (the second core), as a decode worker and a Celery
worker would share a machine.
"off" runs through the same reasoning machine with no checks. Reports accuracy, mean tokens per
problem (wasted ones included), backtracks, give-ups and throughput: over the whole run, and
"saturated" (while the running batch is full, before the drain tail of a fixed problem set).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_mode(mode, problems, prompts, args, verifier) -> dict:
    import torch

    from pipeline.decode.reasoning import ReasoningConfig
    from pipeline.engine import Engine, EngineConfig, SamplingParams
    from pipeline.evals import tasks
    from pipeline.evals.verified import generate_verified

    torch.set_num_threads(1)
    engine = Engine(EngineConfig(model=args.model, dtype="float32", max_num_seqs=args.batch))
    params = [
        SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=s)
        for s in range(args.seed * 1_000_003, args.seed * 1_000_003 + len(prompts))
    ]
    config = ReasoningConfig(
        verify=mode, max_retries=args.max_retries, max_backtracks=args.max_backtracks
    )
    stats: dict = {}
    t0 = time.perf_counter()
    outs = generate_verified(
        engine, prompts, [p.premises for p in problems], params, config,
        verifier if mode != "off" else None, stats,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    correct = [tasks.score(p, o.text)[1] >= 1.0 for p, o in zip(problems, outs, strict=True)]
    tokens = sum(o.num_tokens for o in outs)
    sat_s = stats.get("saturated_s") or 0.0
    return {
        "mode": mode,
        "accuracy": sum(correct) / len(outs),
        "mean_tokens": tokens / len(outs),
        "mean_wasted_tokens": sum(o.wasted_tokens for o in outs) / len(outs),
        "backtracks": sum(o.backtracks for o in outs),
        "checks": sum(o.checks for o in outs),
        "gave_up": sum(o.gave_up for o in outs),
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "problems_per_s": len(outs) / wall,
        "saturated_tokens_per_s": stats["saturated_tokens"] / sat_s if sat_s > 0 else None,
    }


def compare(label: str, problems, args, verifier) -> dict:
    from pipeline.evals.problems import format_prompt

    prompts = [format_prompt(p) for p in problems]
    # An untimed pass first: one-time costs (oneDNN kernel creation for each batch shape, the
    # allocator) would otherwise land on whichever mode runs first.
    run_mode("off", problems, prompts, args, verifier)
    rows = {m: run_mode(m, problems, prompts, args, verifier) for m in ("off", "async", "strict")}
    off = rows["off"]
    head = f"{'mode':<8}{'acc':>8}{'tok':>8}{'wasted':>8}{'bt':>6}{'gave up':>9}"
    head += f"{'wall s':>8}{'tok/s':>8}{'sat tok/s':>11}"
    print(f"\n{label}: {len(problems)} problems, T={args.temperature}, "
          f"max_tokens={args.max_tokens}, k={args.max_retries}")  # fmt: skip
    print(head + "\n" + "-" * len(head))
    for r in rows.values():
        sat = r["saturated_tokens_per_s"]
        print(
            f"{r['mode']:<8}{r['accuracy']:>8.1%}{r['mean_tokens']:>8.1f}"
            f"{r['mean_wasted_tokens']:>8.1f}{r['backtracks']:>6}{r['gave_up']:>9}"
            f"{r['wall_s']:>8.1f}{r['tokens_per_s']:>8.0f}{sat or 0:>11.0f}"
        )
    out = {"problems": len(problems), "modes": rows}
    for m in ("async", "strict"):
        r = rows[m]
        out[f"{m}_accuracy_gain_points"] = 100 * (r["accuracy"] - off["accuracy"])
        out[f"{m}_throughput_ratio"] = r["tokens_per_s"] / off["tokens_per_s"]
        out[f"{m}_problems_per_s_ratio"] = r["problems_per_s"] / off["problems_per_s"]
        if r["saturated_tokens_per_s"] and off["saturated_tokens_per_s"]:
            ratio = r["saturated_tokens_per_s"] / off["saturated_tokens_per_s"]
            out[f"{m}_saturated_throughput_ratio"] = ratio
        print(
            f"{m} vs off: accuracy {out[f'{m}_accuracy_gain_points']:+.1f} points, tok/s ratio "
            f"{out[f'{m}_throughput_ratio']:.2f} (saturated "
            f"{out.get(f'{m}_saturated_throughput_ratio', float('nan')):.2f}), problems/s "
            f"ratio {out[f'{m}_problems_per_s_ratio']:.2f}"
        )
    return out


def main() -> int:
    from pipeline.evals import tasks
    from pipeline.evals.runner import DEFAULT_MODEL
    from pipeline.verify.local import LocalVerifier

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--n", type=int, default=500, help="held-out problems (indist)")
    ap.add_argument("--rg-n", type=int, default=100, help="per reasoning-gym task (0: skip)")
    ap.add_argument("--rg-tasks", default="rg:basic_arithmetic,rg:chain_sum")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--temperature", type=float, default=1.0, help="default: a Job's default temperature"
    )
    ap.add_argument("--max-tokens", type=int, default=512, help="budget, wasted tokens included")
    ap.add_argument("--max-retries", type=int, default=None, help="default: ReasoningConfig's")
    ap.add_argument("--max-backtracks", type=int, default=None)
    ap.add_argument("--batch", type=int, default=64, help="engine max_num_seqs")
    args = ap.parse_args()
    from pipeline.decode.reasoning import ReasoningConfig

    defaults = ReasoningConfig()
    args.max_retries = defaults.max_retries if args.max_retries is None else args.max_retries
    if args.max_backtracks is None:
        args.max_backtracks = defaults.max_backtracks
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    verifier = LocalVerifier(workers=1)
    try:
        report = {
            "bench": "verify_quality",
            "seed": args.seed,
            "max_tokens": args.max_tokens,
            "max_retries": args.max_retries,
            "max_backtracks": args.max_backtracks,
        }
        report["indist"] = compare(
            "indist (held-out)", tasks.load_problems("indist", args.n, args.seed), args, verifier
        )
        if args.rg_n > 0:
            rg = []
            try:
                for name in tasks.parse_tasks(args.rg_tasks):
                    rg += tasks.load_problems(name, args.rg_n, args.seed)
            except tasks.rg_adapter.ReasoningGymUnavailable as e:
                print(f"reasoning-gym skipped: {e}")
            if rg:
                report["reasoning_gym"] = compare(args.rg_tasks, rg, args, verifier)
    finally:
        verifier.close()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
