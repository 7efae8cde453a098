"""Quantities with units and words inside expressions (issue 36, item 1): the claim is the
arithmetic with the words dropped and the units checked; what people write right is never
contradicted, what they write wrong still is."""

from __future__ import annotations

import pytest

from pipeline.verify.checker import CONSISTENT, CONTRADICTED, ENTAILED, NO_CLAIM, Checker
from pipeline.verify.prose import find_claims

E, C, K, N = ENTAILED, CONTRADICTED, CONSISTENT, NO_CLAIM


def verdict(step: str, problem: str = "") -> str:
    return Checker((), problem).check(step).verdict


# (step, the claims' texts, the step's verdict): units and words between the numbers
READ = [
    # a unit before "*" no longer turns the star into markdown emphasis
    ("15 teeth / 30 teeth * 100% = 50%", ["15 teeth / 30 teeth * 100% = 50%"], E),
    ("15 teeth / 30 teeth * 100% = 60%", ["15 teeth / 30 teeth * 100% = 60%"], C),
    ("He runs 60 meters * 3 sprints = 180 meters a day.", ["60 meters * 3 sprints = 180"], E),
    ("That is 60 km/hr * 2 hours = 120 km.", ["60 km/hr * 2 hours = 120"], E),
    ("So 16 eggs per day * 7 days = 112 eggs.", ["16 eggs per day * 7 days = 112"], E),
    ("So 16 eggs per day * 7 days = 102 eggs.", ["16 eggs per day * 7 days = 102"], C),
    ("40 minutes + x + 60 minutes = 160 minutes", ["40 minutes + x + 60 minutes = 160"], K),
    ("3.65 divided by .05 equals 73", ["3.65 divided by .05 equals 73"], E),
    ("40% of 200 is 80 pages", ["40% of 200 is 80"], E),
    (
        "Lucien has 200 basketballs x (20 / 100) = 40 basketballs",
        ["200 basketballs x (20 / 100) = 40"],
        E,
    ),  # fmt: skip
    # GSM8K annotations: the calculator's claim
    ("She makes 9 * 2 = $<<9*2=18>>18 every day.", ["9*2=18"], E),
    ("She makes 9 * 2 = $<<9*2=19>>19 every day.", ["9*2=19"], C),
]


@pytest.mark.parametrize(("step", "texts", "expected"), READ)
def test_units_and_words_between_the_numbers(step, texts, expected):
    assert [c.text for c in find_claims(step)] == texts
    assert verdict(step) == expected


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        # one quantity in two units: checked in one unit, as written or converted
        ("1 hour + 30 minutes = 90 minutes", E),
        ("1 hour + 30 minutes = 80 minutes", C),
        ("Each costs 75 cents, so 75 cents * 4 = 3 dollars.", E),
        ("So, Bea earned $2.50 - $2.24 = 26 cents more than Dawn.", E),
        ("It is 2 hours = 120 minutes.", E),
        ("It is 2 hours = 100 minutes.", C),
        ("3 hours × 60 = 180 minutes", E),  # converted by the writer: true as written
        ("150 minutes = 2 hours 30 minutes, since 2 × 60 = 120.", E),  # the side goes on
        ("First convert: 4.2 GB = 4.2 * 1000 = 4200 MB.", E),  # a unit we do not know
    ],
)
def test_units_of_one_dimension_are_converted(step, expected):
    assert verdict(step) == expected


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        # the percent sign labels a number written as a percentage
        ("Laura expects 100 - 5 = 95% to show up.", K),
        ("So 1260 / 3500 * 100 = 36% of the water.", K),
        ("That is 3 bobby pins / 21 decorations * 100% = 14.28, about 14.", K),
        ("Laura expects 100 - 5 = 90% to show up.", C),
        # a running total: the right side starts from the left side's value
        ("It costs $3/2 = $1.50+$3.00=$4.50 in all.", K),
        ("Then 8*45 = 360 divided by 5 is 360/5 = 72 candles.", K),
        ("Step 1: 10% of 2 = 20% of 2", C),  # not a running total: a wrong claim
        # a division with a remainder
        ("100 stickers / 3 friends = 33 stickers each, with 1 remaining.", K),
        ("100 stickers / 3 friends = 30 stickers each, with 1 remaining.", C),
        # dozens counted, not multiplied, when the result is in dozens or 12 converts them
        ("There are 12 eggs in a dozen, so 84/12 = 7 dozen eggs.", E),
        ("Rozanne has 4 dozen eggs * 12 = 48 eggs in cases.", E),
        ("Ann had 3 dozen oatmeal cookies - 2 dozen = 1 dozen cookies left.", E),
        ("Since a dozen has 12 eggs, 6 dozen * 12 eggs/dozen = 72 eggs.", E),
        ("She buys 4 dozen = 48 eggs.", E),
        # mixed numbers are one number
        ("Thus, W = 1 1/2 / 1/2 = 3 episodes.", K),
        ("Each cup feeds 14 birds, so it feeds 14 * 1 1/2 = 21 birds.", E),
        ("To carry 17 objects, it takes 17/3 = 5 and 2/3 loads.", E),
        ("Arthur can buy 16 because 100 / 6= 16 and (2/3)", E),
        ("There are 12 cookies in a dozen, so she sold 12 x 3 dozen = 36 cookies.", E),
        # a unit after a fraction is the whole fraction's
        ("We convert the time to hours, so 42 minutes = 42/60 hours = 7/10 hours.", E),
        ("So, every 1% is equal to $7500/75% = $100.", K),  # the % labels a number
        ("Martha gets 9 t-shirts + 3 t-shirts = 12 t-shirts.", E),  # a word, not t - shirts
        # "more than", "less than" said in words
        ("Another says 25% more than 80 is 100.", E),
        ("Another says 25% more than 80 is 28.", C),
        ("So 20 more than 45 is 65 cards, and 3 fewer than 10 is 7.", E),
        # an en dash inside a computation subtracts
        ("And we subtract 4 from each side, 3x +4 - 4 = 28 – 4.", K),
        (
            "240 students – (40 students + 84 students + 100 students) = 240 students – 224 "
            "students = 16 students.",
            E,
        ),  # fmt: skip
    ],
)
def test_arithmetic_as_people_write_it(step, expected):
    assert verdict(step) == expected


@pytest.mark.parametrize(
    "step",
    [
        # A side whose operand is in words, or a number that labels: never contradicted.
        "10 cows on the boat - 6 drowned = 4 cows made it to the shore.",
        "Danai will add 20 + 10 decorations to the 29 + 24 decorations up = 83 total.",
        "The number of spaces in section 2 = x + 200.",
        "Remaining 10 = 62,300/10 = $6230",
        "He has to leave 0130 hours earlier than 0900 i.e. 0900-0130 = 0730 hours",
        "Since 2/5 is equal to 12.8 hectares, then 1/5 is equal to 12.8/2 = 6.4 hectares.",
        "It takes 10 – 20 minutes = 15 on average.",
        "x = 304 – 180",
    ],
)
def test_what_words_cut_is_not_contradicted(step):
    result = Checker((), "Solve it.").check(step)
    assert result.verdict != CONTRADICTED, result


def test_a_named_quantity_makes_an_equation_not_a_cut_claim():
    # Read whole: 9 = (3/4) * N, an equation in the step's own unknown (was `9 = (3/4)`).
    (claim,) = find_claims("9 = (3/4)*number of novels she wrote this year")
    assert "number of novels she wrote this year" in str(claim.relation.rhs)
    result = Checker().check("9 = (3/4)*number of novels she wrote this year")
    assert result.verdict == CONSISTENT and result.claims[0].kind == "equation"
    # The unknown belongs to its step: the same words later are not bound to it.
    checker = Checker()
    checker.accept("So 9 = (3/4)*number of novels she wrote this year")
    assert checker.check("And 5 = 2 * number of novels she wrote this year").verdict == K
    step = "Then (2/3)* original amount = 192, and 192 / (2/3) = 288."
    assert [c.verdict for c in Checker().check(step).claims] == [K, E]


# -- dimensions: the numbers may hold while the units do not (issue 36, item 1) --------------


@pytest.mark.parametrize(
    "step",
    [
        "60 km/hr * 2 hours = 120 minutes",
        "60 miles per hour * 2 hours = 120 minutes",
        "3 kg * 2 = 6 hours",
        "He drives 40 km/h for 3 hours, so 40 km/h * 3 hours = 120 hours.",
    ],
)
def test_sides_that_measure_different_things_are_contradicted(step):
    from pipeline.verify.checker import Checker

    v = Checker().check(step)
    assert v.verdict == "contradicted" and "units do not match" in v.detail


@pytest.mark.parametrize(
    "step",
    [
        "60 km/hr * 2 hours = 120 km",
        "3 hours * $10 = $30",  # a rate left implicit: loose, not wrong
        "2 hours * 60 minutes = 120 minutes",
        "120 miles / 60 mph = 2 hours",
        "1 hour + 30 minutes = 90 minutes",
        "16 eggs per day * 7 days = 112 eggs",
        "4 kg * 3 = 12 kg",
        "20 minutes * 3 = 60",
        "5 apples + 3 apples = 8 apples",
    ],
)
def test_sides_alike_or_unmeasured_are_judged_on_their_numbers(step):
    from pipeline.verify.checker import Checker

    assert Checker().check(step).verdict == "entailed"


def test_side_dimensions():
    from pipeline.verify.prose_tokens import NUM, OP, Token
    from pipeline.verify.prose_units import dimension_mismatch, side_dimension

    def num(unit: str = "", dollars: bool = False) -> Token:
        return Token(NUM, "1", 0, 1, unit=unit, dollars=dollars)

    times = Token(OP, "*", 0, 1)
    plus = Token(OP, "+", 0, 1)
    assert side_dimension([num("km/h"), times, num("hours")]) == {"length": 1}
    assert side_dimension([num("hours"), plus, num("km")]) is None  # a sum of unlikes
    assert side_dimension([num("apples")]) is None  # a unit we cannot measure
    assert side_dimension([num(dollars=True)]) == {"money": 1}
    assert dimension_mismatch([num("km")], [num()]) == ""  # a bare number: nothing to compare
