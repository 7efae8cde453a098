"""Decode's fast verdicts (pipeline/verify/fast.py) against the checker on the labelled traces
in bench/data (written for development, and a held-out set by another author): every step the
fast path contradicts, the checker contradicts too, on the same claims; and a step labelled
right is never contradicted by it."""

import json
from pathlib import Path

import pytest

from pipeline.verify.checker import check_step
from pipeline.verify.fast import fast_verdict

DATA = Path(__file__).resolve().parents[3] / "bench" / "data"


def traces(name: str):
    with open(DATA / name) as f:
        for line in f:
            yield json.loads(line)


@pytest.mark.parametrize("name", ["verify_corpus.jsonl", "verify_heldout.jsonl"])
def test_fast_verdicts_are_the_checkers_and_never_refute_a_right_step(name):
    decided = 0
    for t in traces(name):
        steps = [s["text"] for s in t["steps"]]
        for i, s in enumerate(t["steps"]):
            fast = fast_verdict(s["text"])
            if fast is None:
                continue
            decided += 1
            assert s["label"] != "right", (t["id"], s["text"])
            full = check_step(t["problem"], tuple(t["premises"]), tuple(steps[:i]), s["text"])
            assert full.verdict == "contradicted", (t["id"], s["text"], full)
            theirs = {c.span for c in full.claims if c.verdict == "contradicted"}
            assert {c.span for c in fast.claims} <= theirs, (t["id"], s["text"])
    assert decided > 0  # the sets have arithmetic slips for it to decide


def test_what_the_checker_must_decide():
    assert fast_verdict("2 + 2 = 4 and 3 * 3 = 9") is None  # true: grounding is the checker's
    assert fast_verdict("x + 2 = 7") is None  # unknowns: Z3 with state
    assert fast_verdict("10 / 3 = 3.33") is None  # rounded as meant
    assert fast_verdict("-1 / 3 = -0.33") is None  # ... a negative value too
    v = fast_verdict("Then -2 / 3 = 0.67.")  # the sign is wrong: no rounding excuses it
    assert v is not None and [c.text for c in v.claims] == ["-2 / 3 = 0.67"]
    v = fast_verdict("So 7 / 3 = 2 apples, and 2 + 2 = 4.")
    assert v is not None and [c.text for c in v.claims] == ["7 / 3 = 2"]


def test_gsm8k_reference_steps_are_neither_refuted_nor_repaired():
    """GSM8K's 500 test solutions (openai/grade-school-math, bench/data/gsm8k) are right: no
    fast contradiction and no repair on any of their 1,764 steps."""
    from pipeline.verify.repair import find_repair

    steps = [
        step
        for t in traces("gsm8k/test_500.jsonl")
        for step in t["answer"].split("\n")
        if not step.startswith("####")
    ]
    assert len(steps) > 1700
    assert [s for s in steps if fast_verdict(s) is not None] == []
    assert [s for s in steps if find_repair(s, final=True) is not None] == []
