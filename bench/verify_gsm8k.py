"""The verifier on real GSM8K solutions: reference solutions as right steps, model solutions
with hand labels of their first wrong step (bench/data/gsm8k/README.md).

    python bench/verify_gsm8k.py [--n-ref 500] [--json OUT] [--list-flags]

Every solution is checked the way `stepwise verify` checks a trace (`check_trace`: each step
after the steps before it, the problem as the premise source). Classes:
  * reference (GSM8K's lines with their `<<a=b>>` annotations) and reference-plain (the same
    lines with the annotations cut: `She makes 9 * 2 = $18 every day.`), every step right;
  * smollm2 and r1-reasoner: 100 solutions each, right up to the labelled first wrong step.
Figures per class:
  * false contradictions: right steps `contradicted` (target <= 0.5%);
  * caught: labelled first wrong steps `contradicted` (>= 45%);
  * checked: right steps with a claim that was read and decided (entailed, consistent,
    ungrounded or contradicted) (>= 60%);
  * ProcessBench F1: the harmonic mean of the share of wrong solutions whose first flagged
    step is the labelled one and the share of right solutions with nothing flagged (>= 65),
    model solutions against reference-plain (prose, as ProcessBench's are);
each with a flag = `contradicted` (what decode backtracks on), and again with `ungrounded`
counted as a flag. Also: the share of reference solutions with a step flagged, every one
listed with `--list-flags` to be read by hand. checks/s is steps over the checking time in
this process. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.verify.checker import clear_cache  # noqa: E402
from pipeline.verify.offline import check_trace  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "gsm8k"
MODELS = ("smollm2", "r1-reasoner")
SOLUTION_FILES = {"smollm2": "solutions_smollm2.jsonl", "r1-reasoner": "solutions_r1.jsonl"}
TARGETS = {"false_contradictions": 0.005, "caught": 0.45, "checked": 0.60, "f1": 65.0}
CHECKED = frozenset({"entailed", "consistent", "ungrounded", "contradicted"})
CONTRADICTED = frozenset({"contradicted"})  # a flag decode acts on
FLAGS = frozenset({"contradicted", "ungrounded"})  # every flag the verifier reports
_ANNOTATION = re.compile(r"<<[^<>]*>>")


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def reference_steps(answer: str, plain: bool) -> list[str]:
    """A reference solution's lines (the `#### n` line too), annotations cut when `plain`."""
    lines = [line.strip() for line in answer.splitlines() if line.strip()]
    return [_ANNOTATION.sub("", line) if plain else line for line in lines]


def solutions(n_ref: int) -> list[dict]:
    """Every solution to check: {id, class, problem, steps, first_wrong, answer_correct}."""
    problems = read_jsonl(DATA / "test_500.jsonl")[:n_ref]
    by_id = {p["id"]: p for p in read_jsonl(DATA / "test_500.jsonl")}
    out = []
    for cls, plain in (("reference", False), ("reference-plain", True)):
        for p in problems:
            steps = reference_steps(p["answer"], plain)
            out.append({"id": p["id"], "class": cls, "problem": p["question"], "steps": steps,
                        "first_wrong": -1, "answer_correct": True})  # fmt: skip
    labels = {row["id"]: row for row in read_jsonl(DATA / "labels.jsonl")}
    for model in MODELS:
        for row in read_jsonl(DATA / SOLUTION_FILES[model]):
            label = labels[row["id"]]
            out.append({"id": row["id"], "class": model,
                        "problem": by_id[row["problem_id"]]["question"], "steps": row["steps"],
                        "first_wrong": label["first_wrong"],
                        "answer_correct": label["answer_correct"]})  # fmt: skip
    return out


def first_flag(verdicts: list[str], flags: frozenset[str]) -> int:
    return next((i for i, v in enumerate(verdicts) if v in flags), -1)


def score(rows: list[dict], correct: list[dict], flags: frozenset[str]) -> dict:
    """The figures for the solutions `rows`; `correct` are the right solutions F1 pairs them
    with (their own right ones, when they have any, are added)."""
    right = [(r, i) for r in rows for i in range(len(r["steps"]))
             if r["first_wrong"] < 0 or i < r["first_wrong"]]  # fmt: skip
    wrong = [r for r in rows if r["first_wrong"] >= 0]
    false = sum(r["verdicts"][i] in flags for r, i in right)
    checked = sum(bool(CHECKED & set(r["claims"][i])) for r, i in right)
    caught = sum(r["verdicts"][r["first_wrong"]] in flags for r in wrong)
    good = [*correct, *(r for r in rows if r["first_wrong"] < 0 and r["answer_correct"])]
    exact = sum(first_flag(r["verdicts"], flags) == r["first_wrong"] for r in wrong)
    clean = sum(first_flag(r["verdicts"], flags) < 0 for r in good)
    acc_err = exact / len(wrong) if wrong else None
    acc_ok = clean / len(good) if good else None
    f1 = (200 * acc_err * acc_ok / (acc_err + acc_ok)) if acc_err and acc_ok else None
    return {
        "solutions": len(rows), "right_steps": len(right), "wrong_solutions": len(wrong),
        "false_contradictions": _rate(false, len(right)), "false_count": false,
        "caught": _rate(caught, len(wrong)), "caught_count": caught,
        "checked": _rate(checked, len(right)), "checked_count": checked,
        "first_flag_exact": acc_err, "right_unflagged": acc_ok, "f1": f1,
        "flagged_solutions": sum(first_flag(r["verdicts"], flags) >= 0 for r in rows),
    }  # fmt: skip


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:5.1f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-ref", type=int, default=500, help="reference solutions (<= 500)")
    ap.add_argument("--json", type=Path, default=None, help="write every verdict here")
    ap.add_argument("--list-flags", action="store_true", help="print every flagged reference")
    ap.add_argument("--timeout-ms", type=int, default=200)
    args = ap.parse_args()

    rows = solutions(args.n_ref)
    clear_cache()
    t0 = time.perf_counter()
    for r in rows:
        verdicts = check_trace({"premises": [], **r}, args.timeout_ms)
        r["verdicts"] = [v.verdict for v in verdicts]
        r["claims"] = [[c.verdict for c in v.claims] for v in verdicts]
        r["details"] = [
            [(c.text, c.verdict, c.kind, c.detail) for c in v.claims if c.verdict in FLAGS]
            for v in verdicts
        ]
    wall = time.perf_counter() - t0
    num_steps = sum(len(r["steps"]) for r in rows)
    load = os.getloadavg()[0]
    print(f"{len(rows)} solutions, {num_steps} steps; {num_steps / wall:.0f} checks/s "
          f"({wall:.1f} s, load {load:.2f})")  # fmt: skip

    plain = [r for r in rows if r["class"] == "reference-plain"]
    summary: dict = {"bench": "verify_gsm8k", "steps": num_steps, "checks_per_s": num_steps / wall}
    for name, flags in (("contradicted", CONTRADICTED), ("contradicted_or_ungrounded", FLAGS)):
        print(f"\nflag = {name.replace('_', ' ')}")
        print(f"{'class':<17}{'sols':>5}{'right st.':>10}{'false contr.':>14}{'checked':>9}"
              f"{'caught':>9}{'exact 1st':>10}{'clean':>8}{'F1':>7}{'flagged':>9}")  # fmt: skip
        figures = {}
        classes = [("reference", "reference"), ("reference-plain", "reference-plain"),
                   *((m, m) for m in MODELS), ("models", None)]  # fmt: skip
        for label, cls in classes:
            subset = [r for r in rows if (r["class"] == cls if cls else r["class"] in MODELS)]
            correct = plain if cls in (*MODELS, None) else []
            f = score(subset, correct, flags)
            figures[label] = f
            f1 = "-" if f["f1"] is None else f"{f['f1']:.1f}"
            print(f"{label:<17}{f['solutions']:>5}{f['right_steps']:>10}"
                  f"{_pct(f['false_contradictions']):>14}{_pct(f['checked']):>9}"
                  f"{_pct(f['caught']):>9}{_pct(f['first_flag_exact']):>10}"
                  f"{_pct(f['right_unflagged']):>8}{f1:>7}{f['flagged_solutions']:>9}")  # fmt: skip
        summary[name] = figures
    headline = summary["contradicted"]
    all_right = score([r for r in rows if r["class"] != "reference"], [], CONTRADICTED)
    false_rate = all_right["false_contradictions"] or 0
    met = {
        "false_contradictions": false_rate <= TARGETS["false_contradictions"],
        "caught": (headline["models"]["caught"] or 0) >= TARGETS["caught"],
        "checked": (all_right["checked"] or 0) >= TARGETS["checked"],
        "f1": (headline["models"]["f1"] or 0) >= TARGETS["f1"],
    }  # fmt: skip
    print(f"\nover reference-plain and the models' right steps: false contradictions "
          f"{_pct(all_right['false_contradictions'])} ({all_right['false_count']}/"
          f"{all_right['right_steps']}), checked {_pct(all_right['checked'])}; "
          f"targets met: {met}")  # fmt: skip
    summary["right_steps_all"] = all_right
    summary["targets_met"] = met
    verdict_mix = Counter(v for r in rows for v in r["verdicts"])
    summary["verdicts"] = dict(verdict_mix)
    print(f"verdicts: {dict(verdict_mix)}")

    if args.list_flags:
        for cls in ("reference", "reference-plain"):
            flagged = [r for r in rows if r["class"] == cls and FLAGS & set(r["verdicts"])]
            print(f"\n{cls}: {len(flagged)} solutions with a flagged step")
            for r in flagged:
                i = first_flag(r["verdicts"], FLAGS)
                print(f"  {r['id']} step {i} {r['verdicts'][i]}: {r['steps'][i]}")
                for text, verdict, kind, detail in r["details"][i]:
                    print(f"      {verdict} ({kind}) {text!r}: {detail}")
    if args.json:
        args.json.write_text(json.dumps({**summary, "rows": rows}, ensure_ascii=False, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
