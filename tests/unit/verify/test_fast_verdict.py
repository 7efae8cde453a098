"""Decode's fast verdicts (pipeline/verify/fast.py) against the checker on the labelled traces
in bench/data (written for development, and a held-out set by another author): every step the
fast path contradicts (arithmetic, and claims on the unknowns the trace's problem fixes), the
checker contradicts too, on the same claims; and a step labelled right is never contradicted
by it."""

import json
from pathlib import Path

import pytest

from pipeline.verify.checker import check_step
from pipeline.verify.fast import fast_verdict
from pipeline.verify.repair import problem_values

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
        values = problem_values(t["problem"], t["premises"])
        for i, s in enumerate(t["steps"]):
            fast = fast_verdict(s["text"], values=values)
            if fast is None:
                continue
            decided += 1
            assert s["label"] != "right", (t["id"], s["text"])
            full = check_step(t["problem"], tuple(t["premises"]), tuple(steps[:i]), s["text"])
            assert full.verdict == "contradicted", (t["id"], s["text"], full)
            theirs = {c.span for c in full.claims if c.verdict == "contradicted"}
            assert {c.span for c in fast.claims} <= theirs, (t["id"], s["text"])
            kinds = {c.span: c.kind for c in full.claims}
            assert all(kinds[c.span] == c.kind for c in fast.claims), (t["id"], s["text"])
    assert decided > 0  # the sets have arithmetic slips for it to decide


SYSTEM = problem_values("Solve the system: 3x + y = 22, 2x - y = 3.")  # x = 5, y = 7


@pytest.mark.parametrize(
    ("step", "claim", "kind"),
    [
        ("Let me start: 9x = 22 + 3 = 25.", "9x = 22 + 3", "equation"),
        ("To begin, $x = 22 - 3 = 19$.", "x = 22 - 3", "solution"),
        ("So y = 22 - 3 * 4 = 10, then", "y = 22 - 3 * 4", "solution"),
        ("Adding: \\(3x + 2x = 22 + 3\\) and x + y = 13.", "x + y = 13", "equation"),
    ],
)
def test_a_claim_on_unknowns_the_problem_fixes_is_decided_in_decode(step, claim, kind):
    """`3x + y = 22, 2x - y = 3` fixes x and y: a claim on them alone that is false there is
    refuted by the problem, with no round trip; the checker says the same, of the same kind."""
    v = fast_verdict(step, values=SYSTEM)
    assert v is not None and [(c.text, c.kind) for c in v.claims] == [(claim, kind)]
    assert "refuted by the problem" in v.claims[0].detail
    full = check_step("Solve the system: 3x + y = 22, 2x - y = 3.", (), (), step)
    assert full.verdict == "contradicted"
    assert {(c.text, c.kind) for c in full.claims if c.verdict == "contradicted"} >= {(claim, kind)}
    assert fast_verdict(step) is None  # with nothing fixed, the checker decides


@pytest.mark.parametrize(
    "step",
    [
        "Let me start: 5x = 22 + 3 = 25.",  # right
        "So x = 5 and y = 7.",  # right
        "So z = 22 - 3 = 19.",  # an unknown the problem does not fix
        "So 2x = 17 - y, hence",  # an equation that holds at x = 5, y = 7
    ],
)
def test_claims_on_fixed_unknowns_that_hold_are_the_checkers(step):
    assert fast_verdict(step, values=SYSTEM) is None


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
