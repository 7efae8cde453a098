"""Early exit: tokens saved and accuracy lost, per exit policy, against no early exit.

Runs the decode stage's reasoning machine on the engine directly (as `stepwise eval` does) over
the same held-out problems with the same seeds, once without early exit (the baseline) and once
per policy; a policy only changes what happens after its first exit, so every difference is the
policy's. Tokens are everything the job generated: kept, discarded by backtracks, and probes.

    python bench/early_exit.py --n 300 --verify off,async

Prints a table per verify mode and, last, one JSON line with every row and `best`: the policy
with the largest token saving whose accuracy is within `--equal-points` of the baseline's.
"""

from __future__ import annotations

import argparse
import json
import time

POLICIES = {
    # name: (probe_agree, probe_confidence); None turns the confidence criterion off
    "agree2+p0.95": (2, 0.95),
    "agree2+p0.99": (2, 0.99),
    "agree2": (2, None),
    "agree3": (3, None),
}


def run(n: int, verify: str, policy: tuple[int, float | None] | None, temperature: float) -> dict:
    from pipeline.decode.reasoning import ReasoningConfig
    from pipeline.engine import Engine, EngineConfig, SamplingParams
    from pipeline.evals.problems import format_prompt
    from pipeline.evals.runner import DEFAULT_MODEL
    from pipeline.evals.tasks import load_problems, score
    from pipeline.evals.verified import generate_verified
    from pipeline.verify.local import LocalVerifier

    problems = load_problems("indist", n, 0)
    prompts = [format_prompt(p) for p in problems]
    engine = Engine(EngineConfig(model=str(DEFAULT_MODEL), dtype="float32"))
    params = [SamplingParams(temperature=temperature, max_tokens=512, seed=i) for i in range(n)]
    agree, confidence = policy or (2, None)
    cfg = ReasoningConfig(
        verify=verify,
        early_exit=policy is not None,
        probe_agree=agree,
        probe_confidence=confidence,
    )
    verifier = LocalVerifier() if verify != "off" else None
    t0 = time.perf_counter()
    try:
        premises = [tuple(p.premises) for p in problems]
        outs = generate_verified(engine, prompts, premises, params, cfg, verifier)
    finally:
        if verifier is not None:
            verifier.close()
    correct = [score(p, o.text)[1] >= 1 for p, o in zip(problems, outs, strict=True)]
    return {
        "accuracy": sum(correct) / n,
        "mean_tokens": sum(o.num_tokens for o in outs) / n,
        "probe_tokens": sum(o.probe_tokens for o in outs) / n,
        "exits": sum(o.stop_reason == "early_exit" for o in outs),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=300, help="held-out problems (indist mix)")
    ap.add_argument("--verify", default="off,async", help="comma list of verify modes")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma list of policy names")
    ap.add_argument("--equal-points", type=float, default=1.0, help="'equal accuracy' tolerance")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    rows = []
    for verify in args.verify.split(","):
        base = run(args.n, verify, None, args.temperature)
        print(f"\nverify {verify}, {args.n} problems, T={args.temperature}")
        print(
            f"{'policy':<14}{'tokens':>8}{'saving':>8}{'probes':>8}{'exits':>7}{'acc':>8}{'Δpts':>7}"
        )
        print(
            f"{'none':<14}{base['mean_tokens']:>8.1f}{'':>8}{'':>8}{'':>7}{base['accuracy']:>8.1%}"
        )
        for name in args.policies.split(","):
            r = run(args.n, verify, POLICIES[name], args.temperature)
            r["token_saving"] = 1 - r["mean_tokens"] / base["mean_tokens"]
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
