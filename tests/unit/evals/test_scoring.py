from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.evals.exprs import ExprError, evaluate, is_expression
from pipeline.evals.scoring import (
    answers_match,
    check_claim,
    claims_in_line,
    extract_answer,
    parse_answer,
    score_trace,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("37 * 14", 518),
        ("22 - 7", 15),
        ("2(3 + 4)", 14),
        ("20% * 50", 10),
        ("1/2 + 0.25", Fraction(3, 4)),
        ("-3^2", -9),
        ("(-3)^2", 9),
        ("6 ÷ 4 × 2", 3),
        (".5 + 1", Fraction(3, 2)),
    ],
)
def test_evaluate_exact(text, value):
    assert evaluate(text) == value


def test_variables_and_implicit_multiplication():
    assert evaluate("3x") is None
    assert evaluate("3x + 2y", {"x": Fraction(2), "y": Fraction(1)}) == 8
    assert evaluate("2(x + 1)", {"x": Fraction(4)}) == 10


@pytest.mark.parametrize(
    "text", ["", "3 +", "(1", "import os", "__class__", "1 2", "3 = 4", "2^100"]
)
def test_rejects_text_outside_the_grammar(text):
    with pytest.raises(ExprError):
        evaluate(text)


@given(st.integers(-999, 999), st.integers(-999, 999), st.sampled_from("+-*"))
def test_matches_python_integers(a, b, op):
    want = {"+": a + b, "-": a - b, "*": a * b}[op]
    assert evaluate(f"{a} {op} {b}") == want
    assert evaluate(f"({a}) {op} ({b})") == want


def test_division_by_zero_is_a_false_claim_not_a_crash():
    assert is_expression("1 / 0")
    (claim,) = claims_in_line("5 / 0 = 1")
    assert check_claim(claim) is False


@pytest.mark.parametrize(
    ("line", "verdict"),
    [
        ("37 * 14 = 518", True),
        ("37 * 14 = 519", False),
        ("3x = 22 - 7 = 15", True),
        ("3x = 22 - 7 = 16", False),
        ("x = 15 / 3 = 5", True),
        ("Check: 518 + 52 = 570", True),
        ("2 * 15 = 2 * 10 + 2 * 5 = 20 + 10 = 30", True),
        ("2 * 15 = 2 * 10 + 2 * 5 = 20 + 11 = 31", False),
        ("3 < 4 <= 4", True),
        ("5 > 7", False),
        ("3x = 15", None),
    ],
)
def test_check_claim(line, verdict):
    (claim,) = claims_in_line(line)
    assert check_claim(claim) is verdict


def test_gsm8k_annotations():
    claims = claims_in_line("She pays <<3*4=12>>12 dollars and <<12+5=17>>17 in all")
    assert [check_claim(c) for c in claims] == [True, True]
    assert claims_in_line("no claim here") is None


def test_answers():
    assert parse_answer("x = 4, y = 7") == {"x": 4, "y": 7}
    assert parse_answer("7/2") == Fraction(7, 2)
    assert answers_match("3.5", "7/2")
    assert answers_match("x = 5", "5")
    assert answers_match("x=4 and y=7", "x = 4, y = 7")
    assert not answers_match("x = 4, y = 8", "x = 4, y = 7")
    assert not answers_match(None, "1")
    assert answers_match("1,000", "1000")
    assert extract_answer("1 + 1 = 2\nAnswer: 2\n") == "2"
    assert extract_answer("1 + 1 = 2\n") is None


def test_score_trace_counts():
    text = (
        "3x = 22 - 7 = 15\nx = 15 / 3 = 6\nI think so\n3x = 15\nCheck: 3 * 5 + 7 = 22\nAnswer: 6\n"
    )
    s = score_trace(text, "5")
    assert (s.num_lines, s.num_well_formed, s.num_steps) == (6, 5, 5)
    assert (s.num_equations, s.num_equations_right) == (3, 2)
    assert s.answer == "6" and not s.correct
    assert score_trace("Answer: gibberish", "1").num_well_formed == 0
