"""Budget forcing (s1's figure): accuracy against the thinking budget, forced answers counted.

    python bench/budget_forcing.py --model r1-reasoner --tasks broad --n 200 \
        --budgets 32,64,128,256,512 --plot bench/budget_forcing.png

The same held-out problems and sampling seeds at every budget, verification off, so the only
difference is where the thinking is cut: when a budget runs out the decoder closes the thinking
and writes the format's answer prefix (pipeline/reasoning/driver.py), never truncates. Per budget:
accuracy, the share of answers that were forced, and whether the forced ones are well-formed in
the model's format (the thinking closed, the answer after it, found by the format's finder;
for a boxed prefix, the box closed). The no-budget run is the ceiling. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.evals import answers_match  # noqa: E402
from pipeline.evals.completers import EngineCompleter  # noqa: E402
from pipeline.evals.runner import eval_prompts  # noqa: E402
from pipeline.evals.tasks import load_problems  # noqa: E402
from pipeline.evals.verified import generate_verified  # noqa: E402
from pipeline.models.resolve import resolve_model  # noqa: E402
from pipeline.schema import JobParams  # noqa: E402


def run_budget(backend, problems, prompts, budget: int | None, args) -> dict:
    engine, fmt = backend.engine, backend.engine.reasoning_format
    params = [
        JobParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=i,
                  verify="off", max_thinking_tokens=budget)
        for i in range(len(problems))
    ]  # fmt: skip
    t0 = time.perf_counter()
    questions = [p.question for p in problems]
    outs = generate_verified(
        engine, prompts, [()] * len(problems), params, None, questions=questions
    )
    wall = time.perf_counter() - t0
    right = forced = formed = 0
    for p, out in zip(problems, outs, strict=True):
        answer = fmt.find_answer(out.text)
        right += answers_match(answer, p.answer)
        if out.stop_reason == "budget":
            forced += 1
            formed += fmt.well_formed(out.text)
    n = len(problems)
    return {
        "budget": budget,
        "accuracy": right / n,
        "forced": forced / n,
        "forced_well_formed": formed / forced if forced else None,
        "mean_tokens": sum(o.num_tokens for o in outs) / n,
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-reasoner")
    ap.add_argument("--tasks", default="indist")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budgets", default="16,32,64,128,256")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-tokens", type=int, default=768)
    ap.add_argument("--plot", type=Path, default=None, help="write the curve here (PNG)")
    args = ap.parse_args()

    problems = [p for t in args.tasks.split(",") for p in load_problems(t, args.n, args.seed)]
    backend = EngineCompleter(resolve_model(args.model))
    prompts = eval_prompts(problems, backend, backend.engine.reasoning_format)
    budgets = [int(b) for b in args.budgets.split(",")]
    rows = [run_budget(backend, problems, prompts, b, args) for b in [*budgets, None]]
    print(f"{'budget':>8}{'accuracy':>10}{'forced':>9}{'well-formed':>13}{'tokens':>9}")
    for r in rows:
        wf = "-" if r["forced_well_formed"] is None else f"{r['forced_well_formed']:.1%}"
        name = "none" if r["budget"] is None else str(r["budget"])
        print(f"{name:>8}{r['accuracy']:>10.1%}{r['forced']:>9.1%}{wf:>13}{r['mean_tokens']:>9.1f}")
    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.6))
        xs = [r["budget"] for r in rows[:-1]]
        ax.plot(xs, [100 * r["accuracy"] for r in rows[:-1]], "o-", label="accuracy")
        ax.plot(xs, [100 * r["forced"] for r in rows[:-1]], "s--", label="answers forced")
        ax.axhline(100 * rows[-1]["accuracy"], color="grey", ls=":", label="no budget")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("thinking budget (tokens)")
        ax.set_ylabel("%")
        ax.set_title(f"Budget forcing: {args.model}, {len(problems)} held-out problems")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    print(json.dumps({"bench": "budget_forcing", "model": args.model, "rows": rows}))


if __name__ == "__main__":
    main()
