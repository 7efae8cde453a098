"""Claim extraction: every claim form, the limits, unicode digits, and fuzzing."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.verify.claims import (
    DEFAULT_LIMITS,
    QUESTION_VAR,
    BinOp,
    ClaimError,
    ClaimLimits,
    Neg,
    Num,
    Pow,
    Relation,
    Var,
    evaluate,
    extract_claims,
    question_premise,
    variables,
)
from pipeline.verify.prose import extract_premises


def texts(step: str, answer_var: str | None = None) -> list[str]:
    return [rel.text for rel in extract_claims(step, answer_var=answer_var)]


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ("37 * 14 = 518", ["37 * 14 = 518"]),
        ("3x = 22 - 7 = 15", ["3x = 22 - 7", "22 - 7 = 15"]),
        (
            "12 * 7 = 10 * 7 + 2 * 7 = 70 + 14 = 84",
            ["12 * 7 = 10 * 7 + 2 * 7", "10 * 7 + 2 * 7 = 70 + 14", "70 + 14 = 84"],
        ),
        ("1 < x <= 3", ["1 < x", "x <= 3"]),
        ("x ≥ 2", ["x ≥ 2"]),
        ("x ≠ 2, y != 3", ["x ≠ 2", "y != 3"]),
        ("2(x + 1) = (x+1)(x-1)", ["2(x + 1) = (x+1)(x-1)"]),
        ("20% * 50 = 10", ["20% * 50 = 10"]),
        ("3.5 = 7/2", ["3.5 = 7/2"]),
        ("Check: 518 + 52 = 570", ["518 + 52 = 570"]),
        ("pays <<3*4=12>>12 dollars, then <<12/4=3>>3 each", ["3*4 = 12", "12/4 = 3"]),
        ("Answer: x = 4, y = 7", ["x = 4", "y = 7"]),
        ("x = 5.", ["x = 5"]),
        ("Compute the total", []),
        ("", []),
        ("Answer: 5", []),  # bare answer without an answer variable: no claim
    ],
)
def test_claim_forms(step, expected):
    assert texts(step) == expected


def test_bare_answer_uses_answer_var():
    (rel,) = extract_claims("Answer: 7/2", answer_var="x")
    assert rel == Relation(Var("x"), "=", BinOp("/", Num(Fraction(7)), Num(Fraction(2))), "x = 7/2")
    assert extract_claims("Answer: x = 4", answer_var="x")[0].text == "x = 4"


def test_typed_ast():
    (rel,) = extract_claims("-2^2 + 3x = 10% (x)")
    assert rel.op == "="
    assert rel.lhs == BinOp(
        "+", Neg(Pow(Num(Fraction(2)), Num(Fraction(2)))), BinOp("*", Num(Fraction(3)), Var("x"))
    )
    percent = BinOp("/", Num(Fraction(10)), Num(Fraction(100)))
    assert rel.rhs == BinOp("*", percent, Var("x"))
    assert evaluate(rel.rhs.left) == Fraction(1, 10)
    assert [r.op for r in extract_claims("1 ≤ 2, 2 ≥ 1, 1 ≠ 2")] == ["<=", ">=", "!="]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("20%", Fraction(1, 5)),
        ("0.25", Fraction(1, 4)),
        (".5", Fraction(1, 2)),
        ("7/2", Fraction(7, 2)),
        ("2 ** 3 ^ 2", Fraction(512)),  # right-associative
        ("-2^2", Fraction(-4)),
        ("6 × 7 ÷ 3", Fraction(14)),
        ("5 − 2", Fraction(3)),
        ("2(3 + 1)(1 + 1)", Fraction(16)),
    ],
)
def test_exact_values(text, value):
    (rel,) = extract_claims(f"{text} = 0")
    assert evaluate(rel.lhs) == value


@pytest.mark.parametrize(
    "step",
    [
        "total = 5",  # words are not variables
        "2 3 = 6",  # no implicit multiplication between numbers
        "x = 5, so y = 3",
        "3 + = 4",
        "<<3*4=12 dollars",
        "x == 3",
        "10 % 3 = 1",  # % is a percentage, not modulo
    ],
)
def test_unparseable(step):
    with pytest.raises(ClaimError) as info:
        extract_claims(step)
    assert info.value.reason == "unparseable"


@pytest.mark.parametrize(
    "step",
    ["３ + 4 = 7", "٣ + 4 = 7", "3² = 9", "x = ４", "x = 5\u00a0+ 1"],
)
def test_unicode_digits_are_not_numbers(step):
    with pytest.raises(ClaimError) as info:
        extract_claims(step)
    assert info.value.reason == "unparseable"


@pytest.mark.parametrize(
    "step",
    [
        "9^9^9^9 = 1",
        "2^1000000 = 0",
        "2^13 = 8192",
        "2^-1 = 0.5",
        "2^0.5 = 1",
        "x^y = 1",
        "((10^30)^12)^12 = 1",
        "1" * 31 + " = 5",
        "1" * 10_000 + " = 5",
        "(" * 500 + "1" + ")" * 500 + " = 1",
        "x" + "+1" * 300 + " = 1",
        "1 = 1, " * 40,  # over max_claims (32)
        "a + b + c + d + e + f + g + h + i = 0",
        "1 = 1\n" * 1000,
    ],
)
def test_limits(step):
    start = time.perf_counter()
    with pytest.raises(ClaimError) as info:
        extract_claims(step)
    assert info.value.reason == "limit"
    assert time.perf_counter() - start < 0.5


def test_megabyte_line_is_refused_before_parsing():
    start = time.perf_counter()
    with pytest.raises(ClaimError) as info:
        extract_claims("1 + " * 250_000 + "1 = 1")
    assert info.value.reason == "limit"
    assert time.perf_counter() - start < 1.0  # parsing it would take minutes


def test_limits_are_configurable():
    limits = ClaimLimits(max_exponent=20)
    assert len(extract_claims("2^20 = 1048576", limits)) == 1
    with pytest.raises(ValueError):
        ClaimLimits(max_digits=-1)
    assert DEFAULT_LIMITS.max_line_chars == 1000


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        ("Solve the system: 4x + y = 33, 2x - y = 3.", ["4x + y = 33", "2x - y = 3"]),
        ("Solve for x: 5x + 8 = 33.", ["5x + 8 = 33"]),
        ("Solve for x: 5(x + 8) = 65.", ["5(x + 8) = 65"]),
        ("If 3x + 7 = 22 and x > 0, find x; total = 5?", ["3x + 7 = 22", "x > 0"]),
        ("Compute (3 + 8 + 9) / 4.", ["A = (3 + 8 + 9) / 4"]),  # the asked value
        ("A lamp costs 90 dollars. Ravi buys a lamp with 10% off.", []),
        ("9^9^9^9 = 1 and x = ３", []),
    ],
)
def test_extract_premises(problem, expected):
    assert [rel.text for rel in extract_premises(problem)] == expected


def test_variables():
    assert variables(extract_claims("2x + y = 3, z < 1")) == {"x", "y", "z"}
    assert variables([]) == set()


# ---- fuzzing ---------------------------------------------------------------------------------

_ATOMS = st.one_of(
    st.integers(0, 10**40).map(str),
    st.decimals(0, 1000, places=3, allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["x", "y", "z", "3x", "20%", ".5", "0", "total", "３", "e"]),
)
_OPS = st.sampled_from(["+", "-", "*", "/", "^", "**", "×", "÷", "", " ", "%", "="])


@st.composite
def expression_text(draw) -> str:
    parts = [draw(_ATOMS)]
    for _ in range(draw(st.integers(0, 12))):
        parts.append(draw(_OPS))
        if draw(st.booleans()):
            parts.append(draw(st.sampled_from(["(", ")", "-", "(-"])))
        parts.append(draw(_ATOMS))
    return "".join(parts)


@st.composite
def relation_text(draw) -> str:
    sides = draw(st.lists(expression_text(), min_size=1, max_size=4))
    rels = st.sampled_from(["=", "<", ">=", "≠", "!=", "≤"])
    text = sides[0] + "".join(f" {draw(rels)} {s}" for s in sides[1:])
    prefix = draw(st.sampled_from(["", "Check: ", "Answer: ", "<<", "so "]))
    return prefix + text + draw(st.sampled_from(["", ">>", ".", ", x = 1"]))


def _only_claim_errors(step: str, answer_var: str | None = None) -> None:
    start = time.perf_counter()
    try:
        claims = extract_claims(step, answer_var=answer_var)
    except ClaimError as e:
        assert e.reason in {"limit", "unparseable"}
    else:
        assert all(isinstance(rel, Relation) for rel in claims)
    assert time.perf_counter() - start < 1.0


_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(st.text())
def test_fuzz_random_text(text):
    _only_claim_errors(text)
    assert isinstance(extract_premises(text), list)


@_FUZZ
@given(relation_text(), st.sampled_from([None, "x"]))
def test_fuzz_expressions(text, answer_var):
    _only_claim_errors(text, answer_var)
    assert isinstance(extract_premises(text), list)


@pytest.mark.parametrize(
    ("question", "value"),
    [
        ("Q: Compute (3 + 8 + 9) / 4.\n", Fraction(5)),
        ("Calculate 5 - 3 - 6.", Fraction(-4)),
        ("Q: What is 12 + 7?\n", Fraction(19)),
        ("State the final answer to the following arithmetic problem: 4 - 1 - 7 =", Fraction(-4)),
    ],
)
def test_a_question_asking_for_a_value_becomes_a_premise_on_the_answer(question, value):
    rel = question_premise(question)
    assert rel is not None and rel.lhs == Var(QUESTION_VAR) and evaluate(rel.rhs) == value
    assert extract_premises(question) == [rel]


@pytest.mark.parametrize(
    "question",
    ["Q: Solve for x: 4x + 42 = 94.\n", "Mia has 5 cards. What is the total?", "", "Compute x."],
)
def test_other_questions_ask_for_no_value(question):
    assert question_premise(question) is None
