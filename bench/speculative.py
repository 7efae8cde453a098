"""Speculative decoding in the native engine: the same jobs with it off and with each method.

    python bench/speculative.py [--model r1-reasoner] [--task broad] [--n 8] [--runs 5]
                                [--batch 1,8] [--methods ngram,suffix,draft_model] [--k 4]
                                [--max-tokens 512] [--temperature 0.7] [--repeat]
                                [--suffix-config JSON] [--draft-model smollm2]

Each run decodes the same problems (the eval tasks' chat prompts, seeded sampling) once per
side, speculation off and each method on, the order rotated run by run, in one process with the
same engine settings. For each batch size: tokens/s of each side (generated tokens over wall
time, all problems in batches of that size), each method's ratio over off, acceptance (accepted
over proposed) and tokens per verifying pass. `suffix` keeps earlier outputs per scope: each run
is a scope of its own, so a job sees the outputs of the run's other problems, never its own from
an earlier run; `--repeat` puts every run in one scope and samples each run afresh (a fleet that
sees the same problems again; the first run sees none of them). `draft_model` proposes with
`--draft-model` (a checkpoint with the target's tokenizer). `--k` sets ngram's and the draft's
num_speculative_tokens; suffix takes vLLM's default (its tree depth, 24), with `--suffix-config`
JSON over its fields. Every run checks that all sides produced the same tokens, which they must
(pipeline/engine/speculative.py); a difference fails the bench. Medians over runs with their
spread; the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from bench.engine_throughput import emit, git_commit  # noqa: E402
from pipeline.config import EngineConfig, SpeculativeConfig  # noqa: E402
from pipeline.engine import Engine, SamplingParams  # noqa: E402
from pipeline.evals.runner import answer_instruction, chat_content  # noqa: E402
from pipeline.evals.tasks import load_problems  # noqa: E402
from pipeline.models.resolve import resolve_model  # noqa: E402


def prompts(engine: Engine, task: str, n: int, seed: int) -> list[list[int]]:
    instruction = answer_instruction(engine.reasoning_format)
    out = []
    for p in load_problems(task, n, seed):
        if instruction is None:  # the tiny reasoner: its own problem line
            out.append(engine.tokenizer.encode(p.question + "\n", add_special_tokens=False))
        else:
            chat = [{"role": "user", "content": chat_content(p, instruction)}]
            out.append(engine.encode_prompt(chat))
    return out


def decode(engine: Engine, ids: list[list[int]], params: list[SamplingParams], batch: int):
    """All prompts in batches of `batch`; (token ids per prompt, wall s, stats delta)."""
    before = engine.stats.as_dict()
    t0 = time.perf_counter()
    tokens: list[list[int]] = []
    for i in range(0, len(ids), batch):
        outs = engine.generate(ids[i : i + batch], params[i : i + batch])
        tokens += [o.token_ids for o in outs]
    wall = time.perf_counter() - t0
    after = engine.stats.as_dict()
    return tokens, wall, {k: after[k] - before[k] for k in after}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="r1-reasoner")
    ap.add_argument("--task", default="broad")
    ap.add_argument("--n", type=int, default=8, help="problems per run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", default="1,8", help="comma list of batch sizes")
    ap.add_argument("--methods", default="ngram", help="comma list of: ngram, suffix, draft_model")
    ap.add_argument(
        "--draft-model", default="smollm2", help="draft_model's draft (same tokenizer as --model)"
    )
    ap.add_argument(
        "--k", type=int, default=4, help="ngram's and draft_model's num_speculative_tokens"
    )
    ap.add_argument(
        "--repeat", action="store_true", help="suffix: one scope for all runs (repeated jobs)"
    )
    ap.add_argument(
        "--suffix-config",
        default="{}",
        help="suffix's fields as JSON, e.g. '{\"suffix_decoding_max_spec_factor\": 2}'",
    )
    ap.add_argument("--lookup-min", type=int, default=2)
    ap.add_argument("--lookup-max", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)

    methods = [m for m in args.methods.split(",") if m]
    specs = {
        "ngram": SpeculativeConfig(
            num_speculative_tokens=args.k,
            prompt_lookup_min=args.lookup_min,
            prompt_lookup_max=args.lookup_max,
        ),
        "suffix": SpeculativeConfig(method="suffix", **json.loads(args.suffix_config)),
        "draft_model": SpeculativeConfig(
            method="draft_model", model=args.draft_model, num_speculative_tokens=args.k
        ),
    }
    base = EngineConfig(model=str(resolve_model(args.model)), num_threads=args.threads)
    engines = {"off": Engine(base)}
    engines.update({m: Engine(replace(base, speculative=specs[m])) for m in methods})
    ids = prompts(engines["off"], args.task, args.n, args.seed)
    batches = [int(b) for b in args.batch.split(",")]
    print(
        f"{args.model}, {args.task} x {len(ids)}, methods {', '.join(methods)} (ngram k {args.k}, "
        f"lookup {args.lookup_min}-{args.lookup_max}), T {args.temperature}, {args.threads} "
        f"threads; commit {git_commit()}; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    for engine in engines.values():  # warm-up: first-call costs out of the timings
        warm = SamplingParams(temperature=0, max_tokens=8, spec_scope="warm-up")
        engine.generate(ids[:1], warm)

    sides = list(engines)
    figures: dict[int, dict[str, list[float]]] = {b: {} for b in batches}
    for run in range(args.runs):
        # --repeat: the same problems each run, sampled afresh (a seed per run), in one scope.
        scope, seed0 = ("all", 1000 * run) if args.repeat else (f"run-{run}", 0)
        params = [
            SamplingParams(
                temperature=args.temperature,
                seed=seed0 + i,
                max_tokens=args.max_tokens,
                spec_scope=scope,
            )  # fmt: skip
            for i in range(len(ids))
        ]
        for batch in batches:
            order = sides[run % len(sides) :] + sides[: run % len(sides)]
            got = {}
            f = figures[batch]
            for side in order:
                tokens, wall, st = decode(engines[side], ids, params, batch)
                got[side] = tokens
                n = sum(len(t) for t in tokens)
                f.setdefault(f"{side}_tok_s", []).append(n / wall)
                if side != "off":
                    f.setdefault(f"{side}_acceptance", []).append(
                        st["num_spec_accepted"] / max(st["num_spec_proposed"], 1)
                    )
                    # A sequence's tokens per verifying forward: its accepted ones and the one
                    # the target sampled after them.
                    passes = max(st["num_spec_forwards"], 1)
                    f.setdefault(f"{side}_tokens_per_pass", []).append(
                        (st["num_spec_accepted"] + passes) / passes
                    )
            if any(got[m] != got["off"] for m in methods):
                print(f"run {run} batch {batch}: OUTPUTS DIFFER", file=sys.stderr)
                return 1
            line = f"run {run} batch {batch:>2}: off {f['off_tok_s'][-1]:7.1f} tok/s"
            for m in methods:
                f.setdefault(f"{m}_ratio", []).append(f[f"{m}_tok_s"][-1] / f["off_tok_s"][-1])
                line += (
                    f"; {m} {f[f'{m}_tok_s'][-1]:7.1f} ({f[f'{m}_ratio'][-1]:.2f}x, acceptance "
                    f"{100 * f[f'{m}_acceptance'][-1]:.0f}%, "
                    f"{f[f'{m}_tokens_per_pass'][-1]:.2f} tok/pass)"
                )
            print(line, flush=True)

    summary: dict = {
        "bench": "speculative", "model": args.model, "task": args.task, "n": len(ids),
        "methods": methods, "k": args.k, "suffix": str(specs["suffix"]),
        "temperature": args.temperature, "runs": args.runs,
        "repeat": args.repeat, "commit": git_commit(), "identical_outputs": True, "batches": {},
    }  # fmt: skip
    print("\nmedians over runs (min-max):")
    for batch, f in figures.items():
        med = {k: statistics.median(v) for k, v in f.items()}
        spread = {k: (min(v), max(v)) for k, v in f.items()}
        summary["batches"][batch] = {"median": med, "spread": spread}
        line = f"batch {batch:>2}: off {med['off_tok_s']:.1f} tok/s"
        for m in methods:
            lo, hi = spread[f"{m}_ratio"]
            line += (
                f"; {m} {med[f'{m}_tok_s']:.1f}, {med[f'{m}_ratio']:.2f}x ({lo:.2f}-{hi:.2f}), "
                f"acceptance {100 * med[f'{m}_acceptance']:.0f}%, "
                f"{med[f'{m}_tokens_per_pass']:.2f} tokens per verifying pass"
            )
        print(line)
    emit(summary, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
