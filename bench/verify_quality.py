"""Verification quality and cost: verify off / async / strict / repair, side by side, one run.

    python bench/verify_quality.py --n 500 --seed 0
    python bench/verify_quality.py --model r1-reasoner --tasks broad --n 500 --temperature 0.7

Any model (`--model`: a name `stepwise models list` shows, or a directory): prompts as
`stepwise eval` sends them (the tiny reasoner's own line, or the chat template with the
format's answer instruction), answers scored by the model's reasoning format.

The same problems, prompts and sampling seeds in every mode; one fresh engine per mode (so no
mode profits from another's prefix cache), after one untimed warm-up pass; one engine thread,
with the checker in one separate process (the second core), as a decode worker and a Celery
worker would share a machine.
"off" runs through the same reasoning machine with no checks. Reports accuracy, mean tokens per
problem (wasted ones included), backtracks, give-ups and throughput: over the whole run, and
"saturated" (while the running batch is full, before the drain tail of a fixed problem set).
A mode written `MODE+ngram` or `MODE+suffix` runs that mode with speculative decoding (vLLM's
defaults; `--suffix-config` JSON over suffix's): it must give the same texts, and its speed is
compared with MODE's run by run (`--batch 1`: one job at a time).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_engine(args, speculative: str = ""):
    import torch

    from pipeline.config import SpeculativeConfig
    from pipeline.engine import Engine, EngineConfig
    from pipeline.models.resolve import resolve_model

    torch.set_num_threads(1)
    model = str(resolve_model(args.model))
    spec = None
    if speculative:  # a mode's `+ngram` / `+suffix`: vLLM's defaults, --suffix-config over them
        extra = json.loads(args.suffix_config) if speculative == "suffix" else {}
        spec = SpeculativeConfig(method=speculative, **extra)
    return Engine(
        EngineConfig(model=model, dtype=args.dtype, max_num_seqs=args.batch, speculative=spec)
    )


def run_mode(mode, problems, prompts, args, verifier) -> dict:
    from pipeline.config import PipelineConfig
    from pipeline.evals import tasks
    from pipeline.evals.verified import generate_verified
    from pipeline.schema import JobParams

    base, _, speculative = mode.partition("+")
    engine = make_engine(args, speculative)
    fmt = engine.reasoning_format
    # `async-step`: async as it was before claims became the unit of rollback (issue 35): a
    # contradiction rolls back its whole step, and every verdict comes from the checker at the
    # step's end (no fast verdicts, no mid-step rollback). The baseline of the claim-level one.
    verify, _, unit = base.partition("-")
    before = {"rollback": "step", "fast_verdicts": False} if unit == "step" else None
    params = [
        JobParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=s, verify=verify)
        for s in range(args.seed * 1_000_003, args.seed * 1_000_003 + len(prompts))
    ]
    pipeline = PipelineConfig(max_retries=args.max_retries, max_backtracks=args.max_backtracks)
    stats: dict = {}
    t0 = time.perf_counter()
    outs = generate_verified(
        engine, prompts, [p.premises for p in problems], params,
        verifier if verify != "off" else None, stats=stats,
        questions=[p.question for p in problems], pipeline=pipeline,
        reasoning=before,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    engine.close()
    scored = [tasks.score(p, o.text, fmt) for p, o in zip(problems, outs, strict=True)]
    correct = [s[1] >= 1.0 for s in scored]
    formed = [fmt.well_formed(o.text) for o in outs]
    tokens = sum(o.num_tokens for o in outs)
    sat_s = stats.get("saturated_s") or 0.0
    return {
        "mode": mode,
        "accuracy": sum(correct) / len(outs),
        "well_formed": sum(formed) / len(outs),
        "mean_tokens": tokens / len(outs),
        "mean_wasted_tokens": sum(o.wasted_tokens for o in outs) / len(outs),
        "backtracks": sum(o.backtracks for o in outs),
        "checks": sum(o.checks for o in outs),
        "gave_up": sum(o.gave_up for o in outs),
        "repairs": sum(len(o.repairs) for o in outs),
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "problems_per_s": len(outs) / wall,
        "saturated_tokens_per_s": stats["saturated_tokens"] / sat_s if sat_s > 0 else None,
        "texts": hashlib.sha256("\x00".join(o.text for o in outs).encode()).hexdigest()[:16],
        "spec_acceptance": (
            engine.stats.num_spec_accepted / engine.stats.num_spec_proposed
            if engine.stats.num_spec_proposed
            else None
        ),
    }


def median_row(rows: list[dict]) -> dict:
    """Each numeric figure's median over repeated runs of one mode."""
    out = dict(rows[0])
    for k, v in rows[0].items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            vals = [r[k] for r in rows if r[k] is not None]
            out[k] = statistics.median(vals) if vals else None
    return out


def compare(label: str, problems, args, verifier) -> dict:
    from pipeline.engine.tokenizer import Tokenizer
    from pipeline.evals.runner import prompts_for
    from pipeline.formats import format_for
    from pipeline.models.resolve import resolve_model

    # The prompts as `stepwise eval` builds them for this model (its tokenizer and format).
    model = resolve_model(args.model)
    prompts = prompts_for(problems, Tokenizer(model), format_for(model))
    # An untimed pass first: one-time costs (oneDNN kernel creation for each batch shape, the
    # allocator) would otherwise land on whichever mode runs first.
    # One engine batch of it is enough: every mode runs on a fresh engine anyway.
    warm = min(len(problems), args.batch)
    run_mode("off", problems[:warm], prompts[:warm], args, verifier)
    modes = args.modes.split(",")
    # Repeats interleave the modes (off, async, strict, off, ...) so drift in the machine's
    # speed lands on all of them; the figures are each mode's medians, with their range.
    runs = {m: [] for m in modes}
    for _ in range(args.repeats):
        for m in modes:
            runs[m].append(run_mode(m, problems, prompts, args, verifier))
    rows = {m: median_row(rs) for m, rs in runs.items()}
    off = rows.get("off")  # without it, no mode is compared with verification off
    head = f"{'mode':<11}{'acc':>8}{'fmt':>7}{'tok':>8}{'wasted':>8}{'bt':>6}{'rep':>6}"
    head += f"{'gave up':>9}"
    head += f"{'wall s':>8}{'tok/s':>8}{'sat tok/s':>11}"
    print(f"\n{label}: {len(problems)} problems, T={args.temperature}, "
          f"max_tokens={args.max_tokens}, k={args.max_retries}, "
          f"medians of {args.repeats} run(s)")  # fmt: skip
    print(head + "\n" + "-" * len(head))
    for r in rows.values():
        sat = r["saturated_tokens_per_s"]
        print(
            f"{r['mode']:<11}{r['accuracy']:>8.1%}{r['well_formed']:>7.1%}{r['mean_tokens']:>8.1f}"
            f"{r['mean_wasted_tokens']:>8.1f}{r['backtracks']:>6}{r['repairs']:>6}{r['gave_up']:>9}"
            f"{r['wall_s']:>8.1f}{r['tokens_per_s']:>8.0f}{sat or 0:>11.0f}"
        )
    out = {"problems": len(problems), "repeats": args.repeats, "modes": rows, "runs": runs}
    for m in [m for m in modes if m != "off" and off is not None]:
        r = rows[m]
        pairs = list(zip(runs["off"], runs[m], strict=True))  # run i of each mode, side by side
        gains = [100 * (b["accuracy"] - a["accuracy"]) for a, b in pairs]
        ratios = [b["tokens_per_s"] / a["tokens_per_s"] for a, b in pairs]
        out[f"{m}_accuracy_gain_points"] = statistics.median(gains)
        out[f"{m}_accuracy_gain_range"] = [min(gains), max(gains)]
        out[f"{m}_throughput_ratio"] = statistics.median(ratios)
        out[f"{m}_throughput_ratio_range"] = [min(ratios), max(ratios)]
        per_s = [b["problems_per_s"] / a["problems_per_s"] for a, b in pairs]
        out[f"{m}_problems_per_s_ratio"] = statistics.median(per_s)
        out[f"{m}_problems_per_s_ratio_range"] = [min(per_s), max(per_s)]
        if r["saturated_tokens_per_s"] and off["saturated_tokens_per_s"]:
            ratio = r["saturated_tokens_per_s"] / off["saturated_tokens_per_s"]
            out[f"{m}_saturated_throughput_ratio"] = ratio
        print(
            f"{m} vs off: accuracy {out[f'{m}_accuracy_gain_points']:+.1f} points "
            f"({min(gains):+.1f} to {max(gains):+.1f}), tok/s ratio "
            f"{out[f'{m}_throughput_ratio']:.2f} ({min(ratios):.2f}-{max(ratios):.2f}; saturated "
            f"{out.get(f'{m}_saturated_throughput_ratio', float('nan')):.2f}), problems/s "
            f"ratio {out[f'{m}_problems_per_s_ratio']:.2f} ({min(per_s):.2f}-{max(per_s):.2f})"
        )
    # Speculative decoding (`MODE+METHOD`) against the same mode without it, run by run: the
    # same texts are expected (speculation changes no token), and the speed gained.
    for m in [m for m in modes if "+" in m]:
        base = m.partition("+")[0]
        if base not in runs:
            continue
        pairs = list(zip(runs[base], runs[m], strict=True))
        tok = [b["tokens_per_s"] / a["tokens_per_s"] for a, b in pairs]
        per_s = [b["problems_per_s"] / a["problems_per_s"] for a, b in pairs]
        same = sum(a["texts"] == b["texts"] for a, b in pairs)
        out[f"{m}_vs_{base}_tokens_per_s_ratio"] = statistics.median(tok)
        out[f"{m}_vs_{base}_tokens_per_s_range"] = [min(tok), max(tok)]
        out[f"{m}_vs_{base}_problems_per_s_ratio"] = statistics.median(per_s)
        out[f"{m}_vs_{base}_identical_runs"] = same
        print(
            f"{m} vs {base}: tok/s x{statistics.median(tok):.2f} ({min(tok):.2f}-{max(tok):.2f}),"
            f" problems/s x{statistics.median(per_s):.2f} ({min(per_s):.2f}-{max(per_s):.2f}), "
            f"acceptance {rows[m]['spec_acceptance'] or 0:.0%}, same texts in {same} of "
            f"{len(pairs)} runs"
        )
    # What each mode discards against the rollbacks before it, run by run.
    for m, base in (("async", "async-step"), ("repair", "async"), ("repair", "async-step")):
        if m not in runs or base not in runs:
            continue
        pairs = list(zip(runs[base], runs[m], strict=True))
        wasted = [b["mean_wasted_tokens"] / max(a["mean_wasted_tokens"], 1e-9) for a, b in pairs]
        acc = [100 * (b["accuracy"] - a["accuracy"]) for a, b in pairs]
        out[f"{m}_vs_{base}_wasted_ratio"] = statistics.median(wasted)
        out[f"{m}_vs_{base}_accuracy_points"] = statistics.median(acc)
        print(
            f"{m} vs {base}: discarded tokens per problem x{statistics.median(wasted):.2f} "
            f"({min(wasted):.2f}-{max(wasted):.2f}), accuracy {statistics.median(acc):+.1f} "
            f"points ({min(acc):+.1f} to {max(acc):+.1f})"
        )
    return out


def main() -> int:
    from pipeline.evals import tasks
    from pipeline.verify.local import LocalVerifier

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny-reasoner", help="a model name or directory")
    ap.add_argument("--tasks", default="indist", help="a task or group (indist, broad, ...)")
    ap.add_argument("--n", type=int, default=500, help="held-out problems of --tasks")
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
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="the engine's weights")  # fmt: skip
    ap.add_argument(
        "--modes",
        default="off,async,strict,repair",
        help="comma list; each is compared with off where off is listed (async-step: async "
        "rolling back whole steps; "
        "MODE+ngram / MODE+suffix: the mode with speculative decoding)",
    )
    ap.add_argument(
        "--suffix-config", default="{}", help="JSON over suffix speculation's vLLM defaults"
    )
    ap.add_argument("--repeats", type=int, default=1, help="runs per mode (medians reported)")
    args = ap.parse_args()
    from pipeline.reasoning.machine import ReasoningConfig

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
            "dtype": args.dtype,
            "max_retries": args.max_retries,
            "max_backtracks": args.max_backtracks,
        }
        report["model"] = args.model
        report[args.tasks] = compare(
            f"{args.tasks} (held-out)", tasks.load_problems(args.tasks, args.n, args.seed), args,
            verifier,
        )  # fmt: skip
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
