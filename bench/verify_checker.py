"""Verifier throughput: checks/s of `check_step` and of an incremental `Checker` on gold traces.

    python bench/verify_checker.py [--n 500] [--seed 0] [--repeat 3]
    python bench/verify_checker.py --corpus bench/data/verify_corpus.jsonl   # prose steps

One run, the same steps on every side: the gold traces of `load_problems("indist", n, seed)`,
each step of `problem.steps` and then `Answer: <answer>`, checked after the steps before it;
with `--corpus`, the realistic traces of that file instead (R1-style prose, LaTeX, markdown,
GSM8K, think tags, traps: the prose claim finder's work), right, wrong and no-claim steps alike.
  * incremental: one `Checker` per problem, `check(step)` then `accept(step)`;
  * check_step: the stateless task-queue call with its LRU of checkers (a job's calls reuse
    the checker of the previous call);
  * baseline: `check_step` with its caches cleared before every call (every call re-parses
    the premises and accepted steps, and builds a Z3 context when a variable appears).
Each pass starts with cold caches (checkers and parsed steps).
The figures are the best of `--repeat` passes. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.evals.tasks import load_problems  # noqa: E402
from pipeline.verify.checker import CONTRADICTED, Checker, check_step, clear_cache  # noqa: E402


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def traces(n: int, seed: int) -> list[tuple[str, tuple[str, ...], list[str], str]]:
    """(question, premises, steps, family) of each gold trace."""
    return [
        (p.question, tuple(p.premises), [*p.steps, f"Answer: {p.answer}"], p.family)
        for p in load_problems("indist", n, seed)
    ]


def corpus_traces(path: str) -> list[tuple[str, tuple[str, ...], list[str], str]]:
    """(problem, premises, steps, style) of each trace of a labelled corpus (labels unused)."""
    out = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            t = json.loads(line)
            steps = [s["text"] for s in t["steps"]]
            out.append((t["problem"], tuple(t.get("premises", ())), steps, t["style"]))
    return out


def run_incremental(jobs) -> tuple[float, list[float], Counter, dict[str, list[float]]]:
    clear_cache()  # the parsed steps too: every pass starts cold
    lat, verdicts, per_family = [], Counter(), {}
    t0 = time.perf_counter()
    for question, premises, steps, family in jobs:
        checker = Checker(premises, question)
        for step in steps:
            t = time.perf_counter()
            verdicts[checker.check(step).verdict] += 1
            checker.accept(step)
            lat.append(time.perf_counter() - t)
            per_family.setdefault(family, []).append(lat[-1])
    return time.perf_counter() - t0, lat, verdicts, per_family


def run_check_step(jobs, cached: bool) -> tuple[float, list[float], Counter]:
    clear_cache()
    lat, verdicts = [], Counter()
    t0 = time.perf_counter()
    for question, premises, steps, _ in jobs:
        for i, step in enumerate(steps):
            if not cached:
                clear_cache()
            t = time.perf_counter()
            verdicts[check_step(question, premises, steps[:i], step).verdict] += 1
            lat.append(time.perf_counter() - t)
    return time.perf_counter() - t0, lat, verdicts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--corpus", default=None, help="JSONL traces to check instead (prose)")
    args = ap.parse_args()

    jobs = corpus_traces(args.corpus) if args.corpus else traces(args.n, args.seed)
    num_checks = sum(len(steps) for _, _, steps, _ in jobs)
    load = os.getloadavg()[0]
    kind = f"traces of {args.corpus}" if args.corpus else "gold traces"
    print(f"{len(jobs)} {kind}, {num_checks} steps; load average {load:.2f}")

    inc = min((run_incremental(jobs) for _ in range(args.repeat)), key=lambda r: r[0])
    cached = min((run_check_step(jobs, True) for _ in range(args.repeat)), key=lambda r: r[0])
    uncached = min((run_check_step(jobs, False) for _ in range(args.repeat)), key=lambda r: r[0])
    clear_cache()

    rows = [("incremental Checker", inc), ("check_step (LRU)", cached), ("baseline", uncached)]
    print(f"{'side':<22}{'checks/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for name, (wall, lat, *_) in rows:
        print(
            f"{name:<22}{num_checks / wall:>10.0f}{pct(lat, 0.5) * 1e3:>9.3f}"
            f"{pct(lat, 0.99) * 1e3:>9.3f}{max(lat) * 1e3:>9.2f}"
        )
    print("incremental per family (checks/s):")
    for family, lat in sorted(inc[3].items()):
        print(f"  {family:<8}{len(lat) / sum(lat):>10.0f}  p99 {pct(lat, 0.99) * 1e3:.3f} ms")
    print(f"verdicts: {dict(inc[2])}")
    # (With a corpus, the check_step sides also check steps after contradicted ones with them
    # in the chain, as a job that keeps going would: their verdicts may differ from those of
    # the incremental side, which accepts everything it checks.)
    if not args.corpus:
        assert inc[2] == cached[2] == uncached[2], "the three sides disagree"
        assert inc[2][CONTRADICTED] == 0, "a gold step was contradicted"

    summary = {
        "bench": "verify_checker",
        "input": args.corpus or "gold",
        "checks_per_s": num_checks / cached[0],
        "incremental_checks_per_s": num_checks / inc[0],
        "baseline_checks_per_s": num_checks / uncached[0],
        "speedup_vs_baseline": uncached[0] / cached[0],
        "p50_ms": pct(cached[1], 0.5) * 1e3,
        "p99_ms": pct(cached[1], 0.99) * 1e3,
        "num_checks": num_checks,
        "num_traces": len(jobs),
        "verdicts": dict(inc[2]),
        "load": load,
    }
    print(f"check_step with its LRU: {summary['speedup_vs_baseline']:.1f}x the baseline")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
