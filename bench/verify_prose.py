"""Verifier quality on hand-labelled reasoning steps: wrong steps caught, false contradictions.

    python bench/verify_prose.py [--corpus bench/data/verify_corpus.jsonl] [--json OUT]
                                 [--verifier-cmd "python -m pipeline.cli verify -"]

The corpus (bench/data/verify_corpus.jsonl) is one reasoning trace a line, written by hand in
seven styles (R1-like prose, GSM8K lines with and without <<a=b>> annotations, LaTeX, Markdown,
Qwen3 <think> blocks, and traps: dates, clock times, ranges, ratios, versions, approximations),
each step labelled `right` (has an explicit arithmetic relation, all true), `wrong` (one is
false) or `no_claim`. One call of `stepwise verify -` checks every trace, each step after the
steps before it, with the trace's problem and premises; its stdout is one line a trace, in input
order. The figures, over the steps whose claims have a relation symbol:
  * caught: the share of `wrong` steps that are `contradicted` (target >= 95%);
  * false contradictions: the share of `right` and `no_claim` steps `contradicted` (<= 1%);
  * entailed: the share of `right` steps that are `entailed` (>= 85%);
the same three apart for the `words_only` steps ("12 times 7 is 84": a stretch goal), and per
style. checks/s is steps over the wall time of the CLI call (process start included). Every miss
is listed with its claims' reasons. The exit code is 0 whatever the scores; it is non-zero when
the CLI fails or its output does not match the input. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "bench" / "data" / "verify_corpus.jsonl"
LABELS = ("right", "wrong", "no_claim")
CONTRADICTED, ENTAILED = "contradicted", "entailed"
TARGETS = {"caught": 0.95, "false_contradictions": 0.01, "entailed": 0.85}


class MismatchError(Exception):
    """The verifier's output does not line up with its input."""


def load_corpus(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def verifier_input(traces: list[dict]) -> str:
    """The CLI's stdin: one line a trace, the labels dropped."""
    lines = []
    for t in traces:
        job = {
            "id": t["id"],
            "problem": t["problem"],
            "premises": list(t.get("premises", [])),
            "steps": [s["text"] for s in t["steps"]],
        }
        lines.append(json.dumps(job, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def run_verifier(cmd: list[str], stdin: str, timeout: float) -> tuple[str, str, int, float]:
    """(stdout, stderr, returncode, wall seconds) of one call, run in the repository root."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, input=stdin, capture_output=True, encoding="utf-8", cwd=ROOT, timeout=timeout
    )
    return proc.stdout, proc.stderr, proc.returncode, time.perf_counter() - t0


def parse_output(traces: list[dict], stdout: str) -> list[list[dict]]:
    """Each trace's step verdicts, in step order: {"verdict", "claims"}; an error line's steps
    get the verdict "error" (its reason in "error"). Raises MismatchError on a misaligned output."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if len(lines) != len(traces):
        raise MismatchError(f"{len(lines)} output lines for {len(traces)} traces")
    results = []
    for n, (trace, line) in enumerate(zip(traces, lines, strict=True), 1):
        try:
            out = json.loads(line)
        except json.JSONDecodeError as e:
            raise MismatchError(f"output line {n} is not JSON ({e}): {line[:200]!r}") from None
        if not isinstance(out, dict) or out.get("id") != trace["id"]:
            got = out.get("id") if isinstance(out, dict) else out
            raise MismatchError(
                f"output line {n} is for {got!r}, input line {n} is for {trace['id']!r}"
            )
        num_steps = len(trace["steps"])
        if "error" in out:
            error = str(out["error"])
            results.append([{"verdict": "error", "claims": [], "error": error}] * num_steps)
            continue
        verdicts = out.get("verdicts")
        if not isinstance(verdicts, list) or len(verdicts) != num_steps:
            got = len(verdicts) if isinstance(verdicts, list) else verdicts
            raise MismatchError(f"{trace['id']}: {got} verdicts for {num_steps} steps")
        steps = []
        for i, v in enumerate(verdicts):
            if not isinstance(v, dict) or not isinstance(v.get("verdict"), str):
                raise MismatchError(f"{trace['id']}#{i}: no verdict in {v!r}")
            claims = v.get("claims") or []
            steps.append(
                {"verdict": v["verdict"], "claims": claims if isinstance(claims, list) else []}
            )
        results.append(steps)
    return results


def rate(num: int, den: int) -> float | None:
    return num / den if den else None


def fmt_rate(num: int, den: int) -> str:
    return f"{num:>3}/{den:<3} {100 * num / den:5.1f}%" if den else f"{'-':>14}"


def tally(rows: list[dict]) -> dict[str, int]:
    """The counts behind the three figures, over `rows` (label, verdict)."""
    wrong = [r for r in rows if r["label"] == "wrong"]
    right = [r for r in rows if r["label"] == "right"]
    clean = [r for r in rows if r["label"] in ("right", "no_claim")]
    return {
        "wrong": len(wrong),
        "caught": sum(r["verdict"] == CONTRADICTED for r in wrong),
        "clean": len(clean),
        "false_contradictions": sum(r["verdict"] == CONTRADICTED for r in clean),
        "right": len(right),
        "entailed": sum(r["verdict"] == ENTAILED for r in right),
    }


def figures(t: dict[str, int]) -> dict[str, float | None]:
    return {
        "caught": rate(t["caught"], t["wrong"]),
        "false_contradictions": rate(t["false_contradictions"], t["clean"]),
        "entailed": rate(t["entailed"], t["right"]),
    }


def miss_kind(row: dict) -> str | None:
    if row["label"] == "wrong" and row["verdict"] != CONTRADICTED:
        return "wrong step not caught"
    if row["label"] in ("right", "no_claim") and row["verdict"] == CONTRADICTED:
        return "false contradiction"
    if row["label"] == "right" and row["verdict"] != ENTAILED:
        return "right step not entailed"
    return None


def step_rows(traces: list[dict], results: list[list[dict]]) -> list[dict]:
    rows = []
    for trace, steps in zip(traces, results, strict=True):
        for i, (step, got) in enumerate(zip(trace["steps"], steps, strict=True)):
            rows.append({
                "step": f"{trace['id']}#{i}",
                "style": trace["style"],
                "label": step["label"],
                "words_only": bool(step.get("words_only")),
                "verdict": got["verdict"],
                "text": step["text"],
                "note": step.get("note"),
                "claims": got["claims"],
                "error": got.get("error"),
            })  # fmt: skip
    return rows


def print_miss(row: dict) -> None:
    tag = " [words]" if row["words_only"] else ""
    print(f"  {row['step']}{tag} {row['label']} -> {row['verdict']}: {json.dumps(row['text'])}")
    if row["note"]:
        print(f"      note: {row['note']}")
    if row["error"]:
        print(f"      error: {row['error']}")
    for c in row["claims"]:
        if not isinstance(c, dict):
            print(f"      claim {c!r}")
            continue
        span = c.get("span")
        print(
            f"      claim {json.dumps(c.get('text'))} {span} {c.get('verdict')}: {c.get('reason')}"
        )
    if not row["claims"] and not row["error"]:
        print("      (no claims)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--json", type=Path, default=None, help="write the summary and misses here")
    ap.add_argument(
        "--verifier-cmd",
        default=None,
        help="the command that reads the traces on stdin (default: this Python -m pipeline.cli "
        "verify -)",
    )
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for the CLI call")
    args = ap.parse_args()

    traces = load_corpus(args.corpus)
    cmd = (
        shlex.split(args.verifier_cmd)
        if args.verifier_cmd
        else [sys.executable, "-m", "pipeline.cli", "verify", "-"]
    )
    num_steps = sum(len(t["steps"]) for t in traces)
    load = os.getloadavg()[0]
    print(f"{len(traces)} traces, {num_steps} steps from {args.corpus}; load average {load:.2f}")
    print(f"verifier: {shlex.join(cmd)}")

    failure = None
    try:
        stdout, stderr, rc, wall = run_verifier(cmd, verifier_input(traces), args.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        failure = f"the verifier did not run: {e}"
    else:
        if rc != 0:
            tail = "\n".join(stderr.strip().splitlines()[-20:])
            print(f"its stderr ends:\n{tail}")
            failure = f"the verifier exited {rc}"
        else:
            try:
                results = parse_output(traces, stdout)
            except MismatchError as e:
                failure = f"output does not match input: {e}"
    if failure:
        print(failure)
        print(json.dumps({"bench": "verify_prose", "error": failure, "steps": num_steps}))
        return 1

    rows = step_rows(traces, results)
    main_rows = [r for r in rows if not r["words_only"]]
    word_rows = [r for r in rows if r["words_only"]]
    main_t, word_t = tally(main_rows), tally(word_rows)
    main_f, word_f = figures(main_t), figures(word_t)
    errors = sum(1 for steps in results if steps and steps[0]["verdict"] == "error")

    print(f"\n{'':<22}{'main':>16}{'words only':>18}{'target':>10}")
    for key, den, sign in (
        ("caught", "wrong", ">="),
        ("false_contradictions", "clean", "<="),
        ("entailed", "right", ">="),
    ):
        print(
            f"{key.replace('_', ' '):<22}{fmt_rate(main_t[key], main_t[den]):>16}"
            f"{fmt_rate(word_t[key], word_t[den]):>18}{sign:>5}{100 * TARGETS[key]:4.0f}%"
        )
    met = (
        main_f["caught"] is not None
        and main_f["caught"] >= TARGETS["caught"]
        and (main_f["false_contradictions"] or 0.0) <= TARGETS["false_contradictions"]
        and main_f["entailed"] is not None
        and main_f["entailed"] >= TARGETS["entailed"]
    )
    speed = f"{num_steps / wall:.0f} checks/s ({num_steps} steps in {wall:.2f} s)"
    print(f"targets met: {met}; {speed}")
    if errors:
        print(f"{errors} traces came back as error lines (their steps count as misses)")

    print(f"\n{'style':<13}{'steps':>6}{'caught':>16}{'false contr.':>16}{'entailed':>16}")
    per_style = {}
    for style in sorted({r["style"] for r in main_rows}):
        t = tally([r for r in main_rows if r["style"] == style])
        per_style[style] = {"steps": sum(r["style"] == style for r in main_rows), **figures(t)}
        print(
            f"{style:<13}{per_style[style]['steps']:>6}{fmt_rate(t['caught'], t['wrong']):>16}"
            f"{fmt_rate(t['false_contradictions'], t['clean']):>16}"
            f"{fmt_rate(t['entailed'], t['right']):>16}"
        )

    confusion = {
        lab: Counter(r["verdict"] for r in main_rows if r["label"] == lab) for lab in LABELS
    }
    verdict_names = sorted({r["verdict"] for r in rows})
    print("\n" + f"{'label/verdict':<16}" + "".join(f"{v:>14}" for v in verdict_names))
    for lab in LABELS:
        print(f"{lab:<16}" + "".join(f"{confusion[lab][v]:>14}" for v in verdict_names))

    misses = [(kind, r) for r in rows if (kind := miss_kind(r))]
    for kind in ("wrong step not caught", "false contradiction", "right step not entailed"):
        group = [r for k, r in misses if k == kind]
        print(f"\n{kind}: {len(group)}")
        for r in group:
            print_miss(r)

    summary = {
        "bench": "verify_prose",
        **main_f,
        "words_caught": word_f["caught"],
        "words_false_contradictions": word_f["false_contradictions"],
        "words_entailed": word_f["entailed"],
        "targets_met": met,
        "checks_per_s": num_steps / wall,
        "wall_s": wall,
        "counts": main_t,
        "words_counts": word_t,
        "per_style": per_style,
        "verdicts": dict(Counter(r["verdict"] for r in rows)),
        "error_traces": errors,
        "misses": len(misses),
        "traces": len(traces),
        "steps": num_steps,
        "load": load,
    }
    if args.json:
        detail = [{"kind": kind, **r} for kind, r in misses]
        args.json.write_text(
            json.dumps({**summary, "miss_list": detail}, ensure_ascii=False, indent=1)
        )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
