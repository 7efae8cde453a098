"""Solutions to GSM8K test problems written by the models here, for the verifier's labelled set.

    python bench/gsm8k_generate.py --model smollm2 --n 100 \
        --out bench/data/gsm8k/solutions_smollm2.jsonl
    python bench/gsm8k_generate.py --model r1-reasoner --n 100 \
        --out bench/data/gsm8k/solutions_r1.jsonl

Run once: the outputs are committed (bench/data/gsm8k/README.md), so nobody regenerates them,
and the labels (labels.jsonl) index their steps. The first `--n` problems of
bench/data/gsm8k/test_500.jsonl go through the native engine on the CPU, prompted the way
`stepwise eval` prompts a chat model (the question plus the format's answer instruction), one
sampled completion each with a per-problem seed. Each completion is split into steps: the
reasoner's by its format (paragraphs, think markers dropped), SmolLM2's by lines (`steps_of`).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.evals.completers import EngineCompleter  # noqa: E402
from pipeline.evals.runner import prompts_for  # noqa: E402
from pipeline.formats import format_for  # noqa: E402
from pipeline.models.resolve import resolve_model  # noqa: E402
from pipeline.verify.offline import split_text  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "gsm8k"


def steps_of(text: str, format_name: str) -> list[str]:
    """A thinking model's paragraphs (its format's steps); a plain chat model's lines: SmolLM2
    writes one computation a line, often without blank lines, and a label on a paragraph of
    nine computations would say little about where it went wrong."""
    if format_name == "plain":
        return [line.strip() for line in text.splitlines() if line.strip()]
    return split_text(text, format_name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="smollm2 or r1-reasoner")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--batch-size", type=int, default=25)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    problems = [json.loads(line) for line in (DATA / "test_500.jsonl").open()][: args.n]
    model_dir = resolve_model(args.model)
    fmt = format_for(model_dir, None)
    backend = EngineCompleter(model_dir)
    prompts = prompts_for(
        [SimpleNamespace(question=p["question"]) for p in problems], backend.engine.tokenizer, fmt
    )
    seeds = [args.seed * 1_000_003 + i for i in range(len(problems))]
    t0, rows = time.perf_counter(), []
    try:
        for lo in range(0, len(problems), args.batch_size):
            hi = lo + args.batch_size
            outs = backend.generate(prompts[lo:hi], args.temperature, args.max_tokens, seeds[lo:hi])
            for p, seed, comp in zip(problems[lo:hi], seeds[lo:hi], outs, strict=True):
                rows.append({
                    "id": f"{p['id']}:{args.model}",
                    "problem_id": p["id"],
                    "model": args.model,
                    "format": fmt.name,
                    "temperature": args.temperature,
                    "seed": seed,
                    "max_tokens": args.max_tokens,
                    "finish_reason": comp.finish_reason,
                    "num_tokens": comp.num_tokens,
                    "text": comp.text,
                    "steps": steps_of(comp.text, fmt.name),
                })  # fmt: skip
            print(f"{hi}/{len(problems)} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    finally:
        backend.close()
    wall = time.perf_counter() - t0
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    tokens = sum(r["num_tokens"] for r in rows)
    summary = {"bench": "gsm8k_generate", "model": args.model, "solutions": len(rows),
               "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}  # fmt: skip
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
