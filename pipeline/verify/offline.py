"""`stepwise verify`: check reasoning traces offline, from any model or server (JSONL in, per-step
and per-claim verdicts out; the format is in `stepwise verify --help`: pipeline/cli/parser.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

from pipeline.formats import get_format
from pipeline.verify.checker import CONTRADICTED, Checker, ClaimVerdict, StepVerdict
from pipeline.verify.coverage import Tally

MAX_STEPS = 4096  # per trace
MAX_LINE_BYTES = 8 << 20


class TraceError(ValueError):
    """A trace line the verifier cannot take."""


def split_text(text: str, format_name: str | None) -> list[str]:
    """The steps of a whole completion: by the format's delimiter, markers stripped."""
    if format_name:
        fmt = get_format(format_name)
        delimiter = fmt.step_delimiter
        text = fmt.strip_markers(text)
    else:
        delimiter = "\n\n" if "\n\n" in text.strip() else "\n"
    return [s.strip() for s in text.split(delimiter) if s.strip()]


def read_trace(line: str, default_format: str | None = None) -> dict[str, Any]:
    """A validated trace from one input line; TraceError with the reason otherwise."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise TraceError(f"not JSON: {e.msg} at column {e.colno}") from None
    if not isinstance(obj, dict):
        raise TraceError("a trace must be a JSON object")
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        raise TraceError("`id` must be a non-empty string")
    problem = obj.get("problem", "")
    if not isinstance(problem, str):
        raise TraceError("`problem` must be a string")
    premises = obj.get("premises", [])
    if not isinstance(premises, list) or not all(isinstance(p, str) for p in premises):
        raise TraceError("`premises` must be a list of strings")
    fmt = obj.get("format", default_format)
    if fmt is not None and not isinstance(fmt, str):
        raise TraceError("`format` must be a string")
    if "steps" in obj:
        steps = obj["steps"]
        if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
            raise TraceError("`steps` must be a list of strings")
    elif isinstance(obj.get("text"), str):
        try:
            steps = split_text(obj["text"], fmt)
        except ValueError as e:  # an unknown format name
            raise TraceError(str(e)) from None
    else:
        raise TraceError("a trace needs `steps` (a list of strings) or `text` (a string)")
    if len(steps) > MAX_STEPS:
        raise TraceError(f"more than {MAX_STEPS} steps")
    return {"id": obj["id"], "problem": problem, "premises": premises, "steps": steps}


def verdict_json(v: StepVerdict) -> dict[str, Any]:
    return {
        "verdict": v.verdict,
        "reason": v.reason,
        "detail": v.detail,
        "claims": [_claim_json(c) for c in v.claims],
    }


def _claim_json(c: ClaimVerdict) -> dict[str, Any]:
    out = {"text": c.text, "span": list(c.span), "verdict": c.verdict, "reason": c.reason,
           "kind": c.kind, "detail": c.detail}  # fmt: skip
    if c.earlier_span is not None:  # a binding's other statement, a quote's source
        out["earlier"] = {"source": c.earlier_source, "span": list(c.earlier_span)}
    return out


def check_trace(trace: dict[str, Any], timeout_ms: int = 200) -> list[StepVerdict]:
    """Each step checked after the accepted ones before it (a contradicted one is not known,
    but its numbers were said: a later step that uses them is not ungrounded)."""
    checker = Checker(trace["premises"], trace["problem"], timeout_ms=timeout_ms)
    verdicts = []
    for step in trace["steps"]:
        v = checker.check(step)
        verdicts.append(v)
        if v.verdict != CONTRADICTED:
            checker.accept(step)
        else:
            checker.said(step)  # later steps may use its numbers, wrong or not
    return verdicts


def verify_lines(
    lines: Iterable[str], timeout_ms: int = 200, default_format: str | None = None
) -> Iterator[dict[str, Any]]:
    """One output object per non-blank input line, in order."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            if len(line) > MAX_LINE_BYTES:
                raise TraceError(f"line longer than {MAX_LINE_BYTES} bytes")
            trace = read_trace(line, default_format)
        except TraceError as e:
            yield {"id": _id_of(line), "line": number, "error": str(e)}
            continue
        verdicts = check_trace(trace, timeout_ms)
        tally = Tally()
        chain = []
        for v in verdicts:
            claims = [(c.verdict, c.reason) for c in v.claims]
            tally.add_check(claims)
            chain.append((v.verdict, claims))
        yield {
            "id": trace["id"],
            "verdicts": [verdict_json(v) for v in verdicts],
            "coverage": tally.report(chain),
        }


def _id_of(line: str) -> str | None:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None
    value = obj.get("id") if isinstance(obj, dict) else None
    return value if isinstance(value, str) else None


def run(args: argparse.Namespace, stdout: IO[str] | None = None) -> int:
    out = stdout or sys.stdout
    try:
        stream = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")  # noqa: SIM115
    except OSError as e:
        print(f"stepwise verify: cannot read {args.input}: {e.strerror}", file=sys.stderr)
        return 1
    t0, traces, steps = time.perf_counter(), 0, 0
    try:
        fmt = getattr(args, "reasoning_format", None)
        for obj in verify_lines(stream, args.timeout_ms, fmt):
            traces += 1
            steps += len(obj.get("verdicts", ()))
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
            out.flush()
    except (OSError, UnicodeDecodeError) as e:
        print(f"stepwise verify: cannot read {args.input}: {e}", file=sys.stderr)
        return 1
    finally:
        if stream is not sys.stdin:
            stream.close()
    if args.stats:
        dt = max(time.perf_counter() - t0, 1e-9)
        print(f"{traces} traces, {steps} steps, {steps / dt:.0f} checks/s", file=sys.stderr)
    return 0
