"""Claims inside real reasoning text: what is read, what is ignored, spans, per-claim verdicts,
and that no input can break the finder (fuzzing, a 1 MB step)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.verify.checker import CONTRADICTED, ENTAILED, NO_CLAIM, UNKNOWN, Checker
from pipeline.verify.prose import find_claims

E, C, K, N, U = ENTAILED, CONTRADICTED, "consistent", NO_CLAIM, UNKNOWN

# (step, the claims' texts as found, the step's verdict with no premises)
READ = [
    ("So 12 × 7 = 84.", ["12 × 7 = 84"], E),
    ("We have 2 apples and buy 3 more, so 2 + 3 = 6 apples.", ["2 + 3 = 6"], C),
    ("$12 \\cdot 7 = 84$", ["12 \\cdot 7 = 84"], E),
    ("Let me double-check: 9*9=81.", ["9*9=81"], E),
    ("- 2 + 3 = 5", ["2 + 3 = 5"], E),  # a bullet, not a minus sign
    ("* 4 × 6 = 24", ["4 × 6 = 24"], E),
    ("1. First, 15 - 6 = 9.", ["15 - 6 = 9"], E),
    ("**Step 2:** 9 × 3 = 27", ["9 × 3 = 27"], E),
    ("She has 10 - 15 = 2 cards left", ["10 - 15 = 2"], C),
    ("A: 36/4 = 8", ["36/4 = 8"], C),
    ("\\[ \\frac{3}{4} \\times 20 = 15 \\]", ["\\frac{3}{4} \\times 20 = 15"], E),
    ("\\(3 \\times 4 = 13\\)", ["3 \\times 4 = 13"], C),
    ("$$2^{3} + 1 = 9$$", ["2^{3} + 1 = 9"], E),
    ("\\dfrac{10}{2} = 5", ["\\dfrac{10}{2} = 5"], E),
    ("\\left(3 + 4\\right) \\times 2 = 14", ["(3 + 4\\right) \\times 2 = 14"], E),
    ("$9 \\div 3 = 4$", ["9 \\div 3 = 4"], C),
    ("0.2 x 50 = 10", ["0.2 x 50 = 10"], E),  # x between numbers: times
    ("1,250 + 750 = 2,000", ["1,250 + 750 = 2,000"], E),
    ("$5 + $7 = $12", ["5 + $7 = $12"], E),
    ("10 km + 5 km = 15 km", ["10 km + 5 km = 15"], E),
    ("3 hours × 60 = 180 minutes", ["3 hours × 60 = 180"], E),
    ("4 × 400 = 1600 m", ["4 × 400 = 1600"], E),  # a one-letter unit, not a variable
    ("84 / 3.5 = 28 km/h", ["84 / 3.5 = 28"], C),  # 24
    ("20% of 50 = 10", ["20% of 50 = 10"], E),
    ("15% × 80 = 12", ["15% × 80 = 12"], E),
    ("3/4 of 20 = 15", ["3/4 of 20 = 15"], E),
    ("-3 + 5 = 2", ["-3 + 5 = 2"], E),
    ("x = 36 / 6 = 6, y = 7", ["x = 36 / 6", "36 / 6 = 6", "y = 7"], K),
    ("3 + 4 = 7 = 14 / 2", ["3 + 4 = 7", "7 = 14 / 2"], E),
    ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.", ["48/2=24"], E),
    ("</think>\n\nSo 2 + 2 = 4.", ["2 + 2 = 4"], E),
    ("(since 12 × 7 = 84)", ["12 × 7 = 84"], E),
    ("10²  = 100", ["10²  = 100"], E),
    ("Then 84 + 16 = 100, and 100 - 1 = 98.", ["84 + 16 = 100", "100 - 1 = 98"], C),
]


@pytest.mark.parametrize(("step", "texts", "verdict"), READ)
def test_claims_in_prose_are_read_with_their_spans(step, texts, verdict):
    claims = find_claims(step)
    assert [c.text for c in claims] == texts
    for c in claims:
        assert c.relation is not None, c
        assert step[c.span[0] : c.span[1]].strip() == c.text
    result = Checker().check(step)
    assert result.verdict == verdict, result
    assert [c.text for c in result.claims] == texts


# What is not arithmetic, or not arithmetic we evaluate: never contradicted.
TRAPS = [
    "On 2024-03-15 we met.",
    "The meeting starts at 3:45 pm = 15:45.",
    "Read pages 12-20 = 9 pages.",
    "They mixed it in a ratio of 3:2 = 1.5.",
    "The team won 3-1 = a clear win.",
    "Python 3.11 > 3.9, so it is newer.",
    "v2.10 > v2.9",
    "22/7 ≈ 3.14",
    "π ≈ 3.14159",
    "x ~ 5",
    "10 / 3 = approximately 3.33",
    "approximately, 10 / 3 = 3.3",
    "5! = 120",
    "7 ÷ 2 = 3 remainder 1",
    "7 ÷ 2 = 3 R 1",
    "It takes 10–20 minutes = 15 on average.",
    "1/3 = 0.333...",
    "Call 555-1234 = the office.",
    "4 per item times 3 = 12",  # the left side is cut by words: not "3 = 12"
    "5 apples plus 3 + 2 = 10",
    "`total = total + 1` in the code",
    "```python\nx = x + 1\n```",
    "\\sqrt{16} = 5",
    "３ + 4 = 7",
    "1/3 = 0.33",  # rounded as written
    "> 2 + 3 = 5 is a quote marker, not a relation",
]


@pytest.mark.parametrize("step", TRAPS)
def test_what_is_not_arithmetic_is_never_contradicted(step):
    result = Checker().check(step)
    assert result.verdict != CONTRADICTED, result
    assert all(c.verdict != CONTRADICTED for c in result.claims)


def test_an_unreadable_piece_is_unknown_on_its_own():
    result = Checker().check("First \\sqrt{16} = 4, then 3 + 5 = 9.")
    assert result.verdict == CONTRADICTED  # the readable claim still decides
    assert [c.verdict for c in result.claims] == [UNKNOWN, CONTRADICTED]
    assert result.claims[0].reason == "unsupported"
    right = Checker().check("First \\sqrt{16} = 4, then 3 + 5 = 8.")
    assert right.verdict == UNKNOWN and right.claims[1].verdict == ENTAILED


def test_claims_later_in_a_step_may_use_earlier_ones():
    result = Checker().check("Let x = 5. Then 2x = 10, and 3x = 16.")
    assert [c.verdict for c in result.claims] == [K, E, C]
    assert result.verdict == CONTRADICTED


def test_premises_come_from_latex_questions_and_answers_are_checked():
    checker = Checker((), "Solve $6x + 9 = 45$.")
    assert checker.check("$6x = 45 - 9 = 36$").verdict == ENTAILED
    assert checker.check("So x = 7.").verdict == CONTRADICTED
    checker = Checker((), "What is 12 * 7?")
    assert checker.check("The answer is \\boxed{84}.").verdict == ENTAILED
    assert checker.check("The answer is \\boxed{85}.").verdict == CONTRADICTED
    assert checker.check("#### 85").verdict == CONTRADICTED
    assert checker.check("**Answer:** 84").verdict == ENTAILED
    # No asked value: a bare answer is not a claim.
    assert Checker((), "Mia has 5 cards.").check("The answer is 5.").verdict == NO_CLAIM


WORDS = [
    ("12 times 7 is 84", E),
    ("12 times 7 is 86", C),
    ("Half of 48 is 24.", E),
    ("A third of 27 is 8.", C),
    ("the sum of 35 and 3 is 38", E),
    ("48 minus 5 leaves 43", E),
    ("seven times eight, which is 54", C),
    ("Step 3 is 4 × 5 = 20", E),  # "is" after a bare number is not a relation
]


@pytest.mark.parametrize(("step", "verdict"), WORDS)
def test_claims_said_in_words(step, verdict):
    assert Checker().check(step).verdict == verdict


# ---- no input breaks it ------------------------------------------------------------------

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_PIECES = st.sampled_from(
    ["12", "3.5", "1,000", "x", " ", "=", "<", "≈", "+", "-", "−", "×", "*", "**", "/", "÷",
     "^", "%", "(", ")", "{", "}", "$", "$$", "\\frac", "\\times", "\\(", "\\)", "\\text{",
     "apples", "is", "of", "half", "times", "<<", ">>", "<think>", "</think>", "\n", "- ",
     "1. ", "**", ":", "3:45", "2024-01-01", "5!", "\\sqrt", "３", "...", ",", ".", "which"]
)  # fmt: skip


def _never_breaks(step: str) -> None:
    start = time.perf_counter()
    claims = find_claims(step)
    for c in claims:
        assert 0 <= c.span[0] <= c.span[1] <= len(step)
        assert (c.relation is None) == bool(c.reason)
    Checker().check(step)
    assert time.perf_counter() - start < 2.0


@_FUZZ
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_fuzz_math_like_text(step):
    _never_breaks(step)


@_FUZZ
@given(st.text(max_size=300))
def test_fuzz_any_text(step):
    _never_breaks(step)


@pytest.mark.parametrize(
    "step",
    [
        "So 2 + 3 = 5. " * 70_000,  # 1 MB
        "1" * (1 << 20),
        "(" * 100_000 + "1 = 1",
        "x = " + "1 + " * 5_000 + "1",
        "\\frac{" * 5_000 + "1 = 1",
        "2^2^2^2^2^2^2^2^2^2 = 4",
        "9" * 40 + " + 1 = 2",
    ],
)
def test_huge_and_hostile_steps_return_within_limits(step):
    start = time.perf_counter()
    result = Checker().check(step)
    assert time.perf_counter() - start < 1.0
    assert result.verdict in (UNKNOWN, NO_CLAIM)


# Found on the held-out traces (bench/data/verify_heldout.jsonl), each a class of text.
@pytest.mark.parametrize(
    ("step", "verdict"),
    [
        ("$\\frac{19}{12} = 1\\frac{7}{12}$", E),  # a mixed number
        ("First, 4 1/2 = 9/2.", E),
        ("The area is $A = 12.5 \\times 8 = 100\\ \\text{cm}^2$.", K),  # a unit's power
        ("$4 - 10 = -6$ and $-6 + 6 = 0$", E),  # "and" is never a unit
        ("Sure! 10% of 2,350 is 235, and 7% is 2,350 * 0.07 = 164.5.", E),
        ("First convert: 4.2 GB = 4.2 * 1000 = 4200 MB.", E),  # a conversion is not arithmetic
        ("That works out to 6.5 * 1.80 = $12.70 per 100 km.", C),  # "per" is a rate
        ("Total work is 5 × 12 = 60 worker-days.", E),  # a hyphenated unit
        ("1. **Apples:** 4 kg × €2.35/kg = €9.40", E),  # a price per unit
        ("So \\(x = 2\\) or \\(x = 3\\).", K),  # alternatives
        ("Check $x = 7$: $7 + 1 = 8$.", K),  # a hypothesis the premises rule out: not refuted
    ],
)
def test_held_out_classes(step, verdict):
    # The arithmetic is read without a problem (against one, its numbers would be ungrounded).
    problem = "Solve $x^2 - 5x + 6 = 0$." if "x" in step else ""
    assert Checker((), problem).check(step).verdict == verdict


def test_alternatives_and_hypotheses_are_never_taken_as_known():
    checker = Checker((), "Solve $x^2 - 5x + 6 = 0$.")
    for step in ("So x = 2 or x = 3.", "Check x = 3: 9 - 15 + 6 = 0."):
        checker.accept(step)
    assert checker.check("So x = 2 works too.").verdict != CONTRADICTED
