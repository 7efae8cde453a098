"""bench/data/verify_corpus.jsonl: well-formed, balanced, and its <<a=b>> annotations as labelled.

Pure: no verifier runs here (the corpus is a held-out test of one; bench/verify_prose.py scores
it).
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[3] / "bench" / "data" / "verify_corpus.jsonl"
STYLES = {"r1_prose", "gsm8k_calc", "gsm8k_plain", "latex", "markdown", "qwen3_think", "traps"}
LABELS = {"right", "wrong", "no_claim"}
ANNOTATION = re.compile(r"<<([^<>=]+)=([^<>=]+)>>")


def load() -> list[dict]:
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def steps(traces: list[dict], words_only: bool | None = None):
    for t in traces:
        for s in t["steps"]:
            if words_only is None or s["words_only"] == words_only:
                yield t, s


def value(expr: str) -> Fraction:
    """An arithmetic expression of numbers, + - * / and parentheses, evaluated exactly."""

    def ev(node: ast.AST) -> Fraction:
        match node:
            case ast.Expression(body=body):
                return ev(body)
            case ast.Constant(value=int() | float()):
                return Fraction(ast.get_source_segment(expr, node))
            case ast.UnaryOp(op=ast.USub(), operand=x):
                return -ev(x)
            case ast.BinOp(left=a, op=op, right=b):
                ops = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__,
                       ast.Mult: Fraction.__mul__, ast.Div: Fraction.__truediv__}  # fmt: skip
                return ops[type(op)](ev(a), ev(b))
        raise ValueError(f"not plain arithmetic: {expr!r}")

    return ev(ast.parse(expr.strip(), mode="eval"))


def test_every_line_is_a_well_formed_trace():
    with open(CORPUS, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    traces = [json.loads(line) for line in lines]  # every line parses
    ids = [t["id"] for t in traces]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    for t in traces:
        assert set(t) >= {"id", "style", "problem", "premises", "steps"}, t["id"]
        assert t["style"] in STYLES, t["id"]
        assert isinstance(t["problem"], str) and t["problem"].strip(), t["id"]
        assert isinstance(t["premises"], list), t["id"]
        assert all(isinstance(p, str) and p.strip() for p in t["premises"]), t["id"]
        assert t["steps"], t["id"]
        for s in t["steps"]:
            assert set(s) <= {"text", "label", "words_only", "note"}, (t["id"], s)
            assert isinstance(s["text"], str) and s["text"].strip(), t["id"]
            assert s["label"] in LABELS, (t["id"], s["label"])
            assert isinstance(s["words_only"], bool), t["id"]
            assert not (s["words_only"] and s["label"] == "no_claim"), (t["id"], s["text"])


def test_sizes_and_balance():
    traces = load()
    main = [s for _, s in steps(traces, words_only=False)]
    assert len(traces) >= 45
    assert len(main) >= 150
    per_style = Counter(t["style"] for t, _ in steps(traces, words_only=False))
    assert set(per_style) == STYLES
    assert min(per_style.values()) >= 10, per_style
    labels = Counter(s["label"] for s in main)
    assert 0.25 <= labels["wrong"] / len(main) <= 0.40, labels
    assert labels["right"] >= 50 and labels["no_claim"] >= 30, labels
    words = [s for _, s in steps(traces, words_only=True)]
    assert len(words) >= 15
    assert {s["label"] for s in words} == {"right", "wrong"}


def test_traps_are_mostly_without_claims():
    traps = [s for t, s in steps(load(), words_only=False) if t["style"] == "traps"]
    assert sum(s["label"] == "no_claim" for s in traps) >= 20


def test_gsm8k_calc_annotations_evaluate_as_labelled():
    checked = 0
    for t, s in steps(load()):
        if t["style"] != "gsm8k_calc":
            continue
        found = ANNOTATION.findall(s["text"])
        assert s["text"].count("<<") == len(found), (t["id"], s["text"])
        if s["label"] == "no_claim":
            assert not found, (t["id"], s["text"])
            continue
        assert found, (t["id"], s["text"])
        truths = [value(lhs) == value(rhs) for lhs, rhs in found]
        if s["label"] == "right":
            assert all(truths), (t["id"], s["text"])
        else:
            assert not all(truths), (t["id"], s["text"])
        checked += len(found)
    assert checked >= 40


@pytest.mark.parametrize(
    ("expr", "expected"),
    [("48/2", 24), ("3*28+15", 99), ("250*3/5", 150), ("2*1.50", 3), ("0.1+0.2", Fraction(3, 10))],
)
def test_value_is_exact(expr, expected):
    assert value(expr) == expected
