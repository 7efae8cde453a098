"""Early exit: tokens saved and accuracy lost, per exit policy, against no early exit.

Runs the decode stage's reasoning machine on the engine directly (as `stepwise eval` does) over
the same held-out problems with the same seeds, once without early exit (the baseline) and once
per policy; a policy only changes what happens after its first exit, so every difference is the
policy's. Tokens are everything the job generated: kept, discarded by backtracks, and probes.

    python bench/early_exit.py --n 300 --verify off,async
    python bench/early_exit.py --model r1-reasoner --tasks broad --n 200 --verify off

Any model (`--model`, prompts as `stepwise eval` sends them, answers by its reasoning format).
The redundant part is measured from the baseline's own traces: the tokens of the thinking after
the step where the final answer is first stated (its value as a number of that step); a
policy's `redundant_saved` is its token saving (probes included) over those tokens.

Prints a table per verify mode and, last, one JSON line with every row and `best`: the policy
with the largest token saving whose accuracy is within `--equal-points` of the baseline's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

POLICIES = {
    # name: (probe_agree, probe_confidence); None turns the confidence criterion off
    "agree2+p0.95": (2, 0.95),
    "agree2+p0.99": (2, 0.99),
    "agree2": (2, None),
    "agree3": (3, None),
}


def run(args, verify: str, policy: tuple[int, float | None] | None) -> dict:
    from pipeline.evals.completers import EngineCompleter
    from pipeline.evals.runner import eval_prompts
    from pipeline.evals.tasks import load_problems, score
    from pipeline.evals.verified import generate_verified
    from pipeline.models.resolve import resolve_model
    from pipeline.schema import JobParams
    from pipeline.verify.local import LocalVerifier

    n = args.n
    problems = load_problems(args.tasks, n, 0)
    backend = EngineCompleter(resolve_model(args.model))
    engine, fmt = backend.engine, backend.engine.reasoning_format
    prompts = eval_prompts(problems, backend, fmt)
    params = [
        JobParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=i,
                  verify=verify, early_exit=policy is not None)
        for i in range(n)
    ]  # fmt: skip
    agree, confidence = policy or (2, None)
    reasoning = {"probe_agree": agree, "probe_confidence": confidence}
    verifier = LocalVerifier() if verify != "off" else None
    t0 = time.perf_counter()
    try:
        premises = [tuple(p.premises) for p in problems]
        questions = [p.question for p in problems]
        outs = generate_verified(
            engine, prompts, premises, params, verifier, questions=questions, reasoning=reasoning
        )
    finally:
        if verifier is not None:
            verifier.close()
    correct = [score(p, o.text, fmt)[1] >= 1 for p, o in zip(problems, outs, strict=True)]
    redundant = [redundant_tokens(engine.tokenizer, fmt, o.text) for o in outs]
    return {
        "accuracy": sum(correct) / n,
        "mean_tokens": sum(o.num_tokens for o in outs) / n,
        "mean_redundant_tokens": sum(redundant) / n,
        "probe_tokens": sum(o.probe_tokens for o in outs) / n,
        "exits": sum(o.stop_reason == "early_exit" for o in outs),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def redundant_tokens(tokenizer, fmt, text: str) -> int:
    """Tokens of the thinking after the step where the final answer is first stated (the part
    a good exit removes); 0 when the answer is never stated in it."""
    answer = fmt.find_answer(text)
    if not answer:
        return 0
    reasoning = fmt.split(text).reasoning or text
    value = re.escape(answer.strip())
    steps = [s for s in reasoning.split(fmt.step_delimiter) if s.strip()]
    for i, step in enumerate(steps):
        if re.search(rf"(?<![\d.]){value}(?![\d.])", step):
            rest = fmt.step_delimiter.join(steps[i + 1 :])
            return len(tokenizer.encode(rest, add_special_tokens=False)) if rest else 0
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny-reasoner")
    ap.add_argument("--tasks", default="indist", help="a task or group (indist, broad, ...)")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--n", type=int, default=300, help="held-out problems")
    ap.add_argument("--verify", default="off,async", help="comma list of verify modes")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma list of policy names")
    ap.add_argument("--equal-points", type=float, default=1.0, help="'equal accuracy' tolerance")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    rows = []
    for verify in args.verify.split(","):
        base = run(args, verify, None)
        print(f"\nverify {verify}, {args.n} problems, T={args.temperature}")
        print(
            f"{'policy':<14}{'tokens':>8}{'saving':>8}{'probes':>8}{'exits':>7}{'acc':>8}{'Δpts':>7}"
        )
        print(
            f"{'none':<14}{base['mean_tokens']:>8.1f}{'':>8}{'':>8}{'':>7}{base['accuracy']:>8.1%}"
        )
        print(
            f"  redundant (after the answer is first stated): {base['mean_redundant_tokens']:.1f}"
        )
        for name in args.policies.split(","):
            r = run(args, verify, POLICIES[name])
            r["token_saving"] = 1 - r["mean_tokens"] / base["mean_tokens"]
            saved = base["mean_tokens"] - r["mean_tokens"]  # probes are in mean_tokens
            red = base["mean_redundant_tokens"]
            r["redundant_saved"] = saved / red if red else None
            r["accuracy_delta_points"] = 100 * (r["accuracy"] - base["accuracy"])
            rows.append({"verify": verify, "policy": name, "baseline": base, **r})
            print(
                f"{name:<14}{r['mean_tokens']:>8.1f}{r['token_saving']:>8.1%}"
                f"{r['probe_tokens']:>8.1f}{r['exits']:>7}{r['accuracy']:>8.1%}"
                f"{r['accuracy_delta_points']:>+7.1f}"
            )
    equal = [r for r in rows if r["accuracy_delta_points"] >= -args.equal_points]
    best = max(equal, key=lambda r: r["token_saving"], default=None)
    print(json.dumps({"rows": rows, "best": best}))


if __name__ == "__main__":
    main()
