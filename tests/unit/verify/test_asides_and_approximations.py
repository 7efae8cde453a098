"""What people write around the arithmetic of real solutions (issue 36): an aside in words
that labels a number (`$20 (for the shirt) + $15`), a unit said with what it is of (`1 cup of
dog food x 100%`), a rate with its article (`5 days a week *`), LaTeX's thousands (`1{,}200`),
a chain that starts and ends on one unit (`20 chickens = 20 x 3 = 60 chickens`), and `≈`: each
read, so a wrong computation is caught, and what is written right is never contradicted."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pipeline.verify.checker import CONTRADICTED, ENTAILED, Checker
from pipeline.verify.claim_ast import near
from pipeline.verify.prose import find_claims
from pipeline.verify.quantities import quantities


def check(step: str, problem: str = ""):
    return Checker((), problem).check(step)


@pytest.mark.parametrize(
    ("step", "claim", "verdict"),
    [
        # asides in words after an operand: dropped, the arithmetic around them read
        ("So the cost is $20 (for the shirt) + $15 (for the pants) = $35.",
         "20 (for the shirt) + $15 (for the pants) = $35", ENTAILED),
        ("So the cost is $20 (for the shirt) + $15 (for the pants) = $36.",
         "20 (for the shirt) + $15 (for the pants) = $36", CONTRADICTED),
        ("The total number of people is 4 (the number of girls and the number of boys) + 5 = 11.",
         "4 (the number of girls and the number of boys) + 5 = 11", CONTRADICTED),
        ("Total = 4 (girls) + 5 (boys) = 9", "4 (girls) + 5 (boys) = 9", ENTAILED),
        ("her total needs to be 93 (average) * 5 (tests) = 465 points",
         "93 (average) * 5 (tests) = 465", ENTAILED),
        ("4 girls (in class A) + 5 boys = 10", "4 girls (in class A) + 5 boys = 10", CONTRADICTED),
        # a unit with what it is of, before `x`
        ("1 cup of dog food = 1 cup of dog food x 100% = 100 cups",
         "1 cup of dog food x 100% = 100", CONTRADICTED),
        ("So 5 bags of brown rice x 3 = 15 bags.", "5 bags of brown rice x 3 = 15", ENTAILED),
        ("So 90 pieces of straw / 3 cages = 30 pieces of straw.",
         "90 pieces of straw / 3 cages = 30", ENTAILED),
        ("multiply 25 miles per gallon x 12 gallons = 300 miles",
         "25 miles per gallon x 12 gallons = 300", ENTAILED),
        # a rate said with its article before `*`
        ("5 days a week * 10 days a month = 50", "5 days a week * 10 days a month = 50", ENTAILED),
        ("10 dogs per day * 5 days a week = 500 dogs",
         "10 dogs per day * 5 days a week = 500", CONTRADICTED),
        # LaTeX's thousands separator
        ("\\[ 1{,}200 \\div 4 = 300 \\]", "1{,}200 \\div 4 = 300", ENTAILED),
        ("\\[ 2{,}000 - 1{,}500 = 600 \\]", "2{,}000 - 1{,}500 = 600", CONTRADICTED),
    ],
)  # fmt: skip
def test_words_around_the_arithmetic_are_read(step, claim, verdict):
    assert claim in [c.text for c in find_claims(step)]
    v = check(step)
    assert v.verdict == verdict, v
    for c in v.claims:
        assert step[c.span[0] : c.span[1]].strip() == c.text


@pytest.mark.parametrize(
    "step",
    [
        "3(x) + 2 = 11",  # a lone letter in parentheses: a product
        "We know that .4(Number of Minutes) = .25(Number of Minutes) + .6",  # tight: a product
        "Mario ate 8 ounces + Lydia ate 24 ounces = 8 + 24 = 32 ounces",  # words before
        "so 1 hour 20 minutes = (60+20) minutes = 80 minutes",  # the end of a longer quantity
        "2 hours 20 minutes = 2 × 60 + 20 = 140 minutes",
        "2 hours = 2 x 60 = 120 minutes",  # a conversion
        "5 bags = 5 x 4 = 20 apples",  # unlike units: a conversion by the problem's rate
        "The answer (in dollars) = 5 + 3 = 8",
    ],
)
def test_what_is_right_as_written_stays_uncontradicted(step):
    v = check(step)
    assert v.verdict != CONTRADICTED, v
    assert all(c.verdict != CONTRADICTED for c in v.claims)


def test_a_chain_from_one_unit_to_the_same_unit_is_arithmetic_all_along():
    v = check("1. 20 chickens = 20 x 3 = 60 chickens")
    assert v.verdict == CONTRADICTED
    assert [c.text for c in v.claims] == ["20 chickens = 20 x 3", "20 x 3 = 60"]
    assert [c.verdict for c in v.claims] == [CONTRADICTED, ENTAILED]
    assert check("- 20 chickens = 20 x 1 = 20 chickens").verdict == ENTAILED


def test_latex_thousands_are_one_number_to_grounding_too():
    assert [q.values[0] for q in quantities("It cost $1{,}200 in 3 payments")] == [1200, 3]


@pytest.mark.parametrize(
    ("step", "verdict"),
    [
        ("1 / 12 ≈ 0.0595, which is approximately 1.595 centimeters.", CONTRADICTED),
        ("22/7 ≈ 3.14", ENTAILED),  # rounded at its precision
        ("10/3 ≈ 3.3", ENTAILED),
        ("3/2 ≈ 2", ENTAILED),  # rounded up or down, within a unit of its last place
        ("365/7 ≈ 52", ENTAILED),
        ("987 + 5 ≈ 1000", ENTAILED),  # an estimate within a fifth
        ("\\( 100 / 7 \\approx 14.29 \\)", ENTAILED),
        ("\\( 2/3 \\approx 0.5 \\)", CONTRADICTED),
        ("Speed ≈ 45 / 0.75 ≈ 60 mph", ENTAILED),
        ("It costs $100 / 3 ≈ $33.33 each", ENTAILED),
    ],
)
def test_an_approximation_is_judged_loosely(step, verdict):
    v = check(step)
    assert v.verdict == verdict, v
    assert all(c.kind == "arithmetic" for c in v.claims)


@pytest.mark.parametrize(
    "step",
    [
        "1 mile ≈ 1.6 km",  # a conversion, not a computation
        "3.14159 ≈ 3.1",  # a lone number restated
        "π ≈ 3.14159",  # what we do not evaluate
        "x ≈ 5",  # unknowns
        "x ~ 5",
        "20 ~ 30 minutes",  # a tilde: a range, never a claim
    ],
)
def test_approximations_that_are_not_computations_are_no_claims(step):
    assert find_claims(step) == ()


def test_near_is_a_rounding_or_a_fifth():
    assert near(Fraction(1, 12), Fraction("0.083"))
    assert near(Fraction(3, 2), Fraction(1)) and near(Fraction(3, 2), Fraction(2))
    assert near(Fraction(987), Fraction(1000))
    assert not near(Fraction(1, 12), Fraction("0.0595"))
    assert not near(Fraction(150), Fraction(100))
