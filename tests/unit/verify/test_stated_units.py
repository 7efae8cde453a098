"""Units carried over from where the problem stated a number (issue 36, items 1 and 3): a bare
product of two numbers the problem stated as the same thing (`$40 * $4`, hours by hours) is
true arithmetic that counts nothing, and is contradicted; what people write right is not."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pipeline.verify.checker import CONTRADICTED, ENTAILED, Checker
from pipeline.verify.prose import find_claims
from pipeline.verify.quantities import quantities
from pipeline.verify.stated_units import StatedUnits

GROCERIES = (
    "Stephen's final bill came to $40.00. They added a 25% fee and charged him $3.00 in "
    "delivery fees. Stephen also added a $4.00 tip. What was the final price?"
)
PING_PONG = (
    "Mike plays ping pong for 40 minutes. In the first 20 minutes, he scores 4 points. In the "
    "second 20 minutes, he scores 25% more points. How many total points did he score?"
)
CUSTOMERS = (
    "Billy has 8 customers on Tuesday. His first 3 customers buy one DVD each. His next 2 "
    "customers buy 2 DVDs each. How many DVDs did Billy sell?"
)


@pytest.mark.parametrize(
    ("problem", "step", "numbers"),
    [
        (GROCERIES, "To begin, 40 × 4 = 160.", "40 and 4 were both stated in dollar"),
        (PING_PONG, "To begin, 40 × 20 = 800. Then 800 + 25 = 825.", "40 and 20"),
        (CUSTOMERS, "Let me start: 8 * 3 = 24.", "8 and 3 were both stated in customer"),
        (GROCERIES, "Step by step:\n- $40 \\times 3 = 120$", "40 and 3"),  # LaTeX math
    ],
)
def test_a_product_of_two_quantities_of_one_unit_is_contradicted(problem, step, numbers):
    v = Checker((), problem).check(step)
    assert v.verdict == CONTRADICTED
    assert numbers in v.claims[0].detail and "counts nothing" in v.claims[0].detail


@pytest.mark.parametrize(
    ("problem", "step"),
    [
        # one operand stated in two senses, or bare ("3 times a week"): ambiguous
        ("James runs 3 sprints 3 times a week. He runs 60 meters each sprint.", "3 * 3 = 9"),
        ("Each carton costs $4. She needs 4 cartons.", "So 4 * 4 = $16."),
        # 2 and 1 multiply anything (double, twice, a round trip)
        ("Robi saved $2 in January and doubles it each month; $16 in April.", "16 * 2 = $32"),
        # a rate times its own unit
        ("Her dog eats 4 pounds of food for every pound Ella eats. Ella eats 20 pounds.",
         "The dog eats 4 * 20 = 80 pounds."),
        # where a text speaks of an area or a grid, like by like means something
        ("John plants a plot of 3 trees by 4 trees. Each tree gives 5 apples.", "3*4=12 trees"),
        ("A square room is 12 feet on each side and 12 feet high.", "12 * 12 = 144"),
        # units a step states are its own: worked-out counts multiply legitimately
        ("How many 30 cm tiles cover a floor of 4.5 m by 3.6 m?", "15 * 12 = 180 tiles"),
        ("A farmer has 5 cows and 7 hens.", "5 * 7 = 35"),  # unlike units
        ("4x + y = 13 and 2x + y = 9.", "4 * 2 = 8"),  # letters are variables
    ],
)  # fmt: skip
def test_products_that_mean_something_are_judged_on_their_numbers(problem, step):
    v = Checker((), problem).check(step)
    assert v.verdict != CONTRADICTED, v.detail
    assert all(c.kind == "arithmetic" and "counts nothing" not in c.detail for c in v.claims)


def test_a_value_worked_out_before_is_not_the_problem_s_quantity():
    problem = "Sandwiches are $5 each. Snacks are $4 each. Theo buys for 2 + 2 people."
    checker = Checker((), problem)
    checker.accept("They are 2 + 2 = 4 people.")
    assert checker.check("The sandwiches are $5 x 4 = $20.").verdict == ENTAILED
    # inside one step too
    step = "There are 2 + 2 = 4 people, so the sandwiches are 5 x 4 = $20."
    assert Checker((), problem).check(step).verdict == ENTAILED


def test_stated_units_reads_the_problem_and_the_steps():
    units = StatedUnits("Janet's ducks lay 16 eggs per day. She sells them at $2 per egg.")
    assert units.units[16] == {"egg rate"} and units.units[2] == {"dollar rate"}
    units.add("She sells 9 eggs.")
    assert units.units[9] == {"egg"}
    found = find_claims("So 9 * 9 = 81.")
    assert units.squared("So 9 * 9 = 81.", found) == {}  # 9 was never stated by the problem


def test_latex_math_dollars_are_no_currency():
    assert [q.unit for q in quantities("Let me start: $5 \\times 5 = 25$.")] == ["", "", ""]
    assert [q.unit for q in quantities("length $12.5$ cm and width $8$ cm")] == ["cm", "cm"]
    assert [q.unit for q in quantities("She pays $5 + $3 = $8 in all")] == ["dollar"] * 3
    assert [q.unit for q in quantities("It costs $4 and $5.")] == ["dollar"] * 2


# -- units written in the claim itself ------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "verdict"),
    [
        ("He earns $5 per hour * 8 hours = $40.", ENTAILED),
        ("He earns $12 an hour * 3 hours = $36.", ENTAILED),
        ("He earns $5 per hour * 8 hours = 40 hours.", CONTRADICTED),
        ("So 5 km + 3 hours = 8 km.", CONTRADICTED),
        ("So 5 km + 3 km = 8 km.", ENTAILED),
        ("So 3 hours * $10 + $5 = $35", ENTAILED),  # terms that share money: loose, not wrong
    ],
)
def test_rates_and_sums_with_units_in_the_claim(step, verdict):
    v = Checker().check(step)
    assert v.verdict == verdict
    if verdict == CONTRADICTED:
        assert "units do not match" in v.detail


def test_half_a_cup_is_no_rate():
    assert [c.relation for c in find_claims("1/2 a cup = 4 ounces") if c.relation] == []


CANDLE = (
    "A candle melts by 2 centimeters every hour that it burns. How many centimeters shorter "
    "will a candle be after burning from 1:00 PM to 5:00 PM?"
)
AGES = "Darrell and Allen's ages are in the ratio of 7:11. If their total age now is 162, ..."


def test_a_two_times_itself_is_judged_where_no_word_makes_a_two():
    v = Checker((), CANDLE).check("2 * 2 = 4.")
    assert v.verdict == CONTRADICTED and "counts nothing" in v.claims[0].detail
    # two things joined by "and", "each", "twice", "half", "both", "round trip": a 2 too
    for problem in (
        "On Mondays and Wednesdays, she eats 2 candies a day. How many in a week?",
        "Tom and Ann each eat 2 apples a day. How many apples a day?",
        "Jim watches TV for 2 hours and reads for half as long.",
        "A robe takes 2 bolts of blue fiber and twice as much white fiber.",
        "The trail is 2 miles each way. How far is the round trip?",
    ):
        assert Checker((), problem).check("2 * 2 = 4.").verdict == ENTAILED, problem


def test_terms_of_one_ratio_multiplied_count_nothing():
    v = Checker((), AGES).check("Let me start: 7 * 11 = 77.")
    assert v.verdict == CONTRADICTED
    assert "terms of one ratio (7:11)" in v.claims[0].detail
    assert Checker((), AGES).check("The parts are 7 + 11 = 18.").verdict == ENTAILED
    # a value a step worked out that equals a term is not the term
    marbles = "Thirty-six marbles are divided between Mario and Manny in the ratio 4:5."
    checker = Checker((), marbles)
    checker.accept("The parts are 4 + 5 = 9, so each part is 36 / 9 = 4 marbles.")
    assert checker.check("Manny has 5 parts x 4 = 20 marbles.").verdict == ENTAILED
    # a clock time is no ratio
    assert (
        Checker((), "She left at 7:11 and ran 7 laps of 11 minutes.").check("7 * 11 = 77").verdict
        == ENTAILED
    )


RECORDS = (
    "Marilyn's first record sold 10 times as many copies as Harald's. They sold 88,000 copies."
)
SHIP = "Tom's ship travels at 10 miles per hour from 1 to 4 PM. He then travels back at 6 mph."


def test_a_multiplier_the_problem_states_once_times_itself_counts_nothing():
    v = Checker((), RECORDS).check("Let me start: $10 \\times 10 = 100$.")
    assert v.verdict == CONTRADICTED and "10 times itself" in v.claims[0].detail
    dana = "Dana can run four times faster than she can walk. She skips at 3 miles per hour."
    assert Checker((), dana).check("- 4 * 4 = 16").verdict == CONTRADICTED
    for problem, step in (
        # applied again and again: each layer three times the one above
        ("Each layer has three times as many blocks as the layer above. The top has 1.",
         "There are 3 * 3 = 9 blocks in the third layer."),
        # stated twice (`three-eyed` too): the second may be the other one
        ("Jan's three-eyed lizard has 3 times more wrinkles than eyes.", "3*3=9 wrinkles"),
        # a count or a rate meets itself through what the problem implies
        ("3 people came by to get all their tricycle tires inflated.", "3 times 3 equals 9"),
        ("The gym costs $12 per month. What does a year cost?", "$12 * 12 months = $144"),
        ("Emily can type 60 words per minute.", "60 words * 60 minutes = 3600 words"),
    ):  # fmt: skip
        assert Checker((), problem).check(step).verdict == ENTAILED, problem
    # worked out again by a step: no longer the problem's multiplier
    checker = Checker((), RECORDS)
    checker.accept("Harald sold 88,000 / 11 = 8,000, so 100 / 10 = 10 records a day.")
    assert checker.check("Then 10 * 10 = 100.").verdict == ENTAILED


def test_two_rates_per_the_same_span_of_time_multiplied_count_nothing():
    v = Checker((), SHIP).check("To begin, 10 * 1 = 10. Which means $10 \\times 6 = 60$.")
    assert v.verdict == CONTRADICTED
    assert "10 and 6 are both stated per hour" in v.claims[-1].detail
    assert (
        Checker((), SHIP).check("It takes 4 - 1 = 3 hours, so 10 * 3 = 30 miles.").verdict
        == ENTAILED
    )
    for problem, step in (
        # per different spans: $ an hour by hours a day is dollars a day
        ("He earns $15 an hour and works 8 hours a day.", "15 * 8 = $120"),
        # half an hour is a duration, not a rate
        ("James drives 30 mph for half an hour.", "His first drive was 30*.5=15 miles"),
        # a value a step worked out that equals a rate is no longer the rate
        ("John drives 20 miles to work each way 5 days a week, and 40 miles a week for fun.",
         "So he drives 40*5=200 miles for work"),
    ):  # fmt: skip
        checker = Checker((), problem)
        if "40*5" in step:
            checker.accept("He drives 20 * 2 = 40 miles a day.")
        assert checker.check(step).verdict == ENTAILED, problem


def test_a_product_with_one_restates_and_works_nothing_out():
    units = StatedUnits("He goes on four vacations a year.")
    units.add("1 * 4 = 4, and 4 / 1 = 4.")
    assert units.results == set()
    units.add("4 + 4 = 8, and 8 * 1 = 9.")
    assert units.results == {Fraction(8), Fraction(9)}


def test_a_value_stated_as_many_times_as_it_is_multiplied_by_is_a_count_of_its_groups():
    mishka = (
        "Mishka bought 3 pairs of shorts, 3 pairs of pants, and 3 pairs of shoes. One pair of "
        "shorts costs $16.50. How many dollars did Mishka spend?"
    )
    assert Checker((), mishka).check("First, 3 * 3 = 9 pairs.").verdict == ENTAILED
    two_kinds = "Mishka bought 3 pairs of shorts and 3 pairs of pants."
    assert Checker((), two_kinds).check("First, 3 * 3 = 9.").verdict == CONTRADICTED


def test_a_fraction_s_numerator_taken_for_the_fraction_counts_nothing():
    scouts = "Out of the 200 students, 2/5 are boys and 2/3 of the girls are in the girl scout."
    v = Checker((), scouts).check("First, $2 \\times 200 = 400$.")
    assert v.verdict == CONTRADICTED and "only as a fraction's numerator" in v.claims[0].detail
    drink = "I have 10 liters of orange drink that are two-thirds water."
    assert Checker((), drink).check("10 * 2 = 20.").verdict == CONTRADICTED
    for problem, step in (
        # the fraction the long way round, in one expression
        (scouts, "The boys are 200 * 2 / 5 = 80."),
        (scouts, "Multiply by 2: 200 × 2 = 400. Then divide by 5: 400 ÷ 5 = 80 boys."),
        # a 2 of a round trip: to and from work
        ("He has 2/3 of a tank left after he drives to and from work, 10 miles away.",
         "He drove 2 x 10 = 20 miles."),
        # the numerator stated alone too, or as a denominator: not only a numerator
        ("She has 2 cats and 2/3 of a bag of food.", "2 * 3 = 6"),
        ("A quarter of the 20 apples are red.", "20 * 4 = 80"),  # a quarter is no numerator
    ):  # fmt: skip
        assert Checker((), problem).check(step).verdict != CONTRADICTED, (problem, step)


def test_a_number_stated_nowhere_times_itself_counts_nothing():
    laundry = "Sarah does 4 times as much laundry as David. Sarah does 400 pounds of laundry."
    v = Checker((), laundry).check("Let me start: $5 \\times 5 = 25$.")
    assert v.verdict == CONTRADICTED and "5 is stated nowhere" in v.claims[0].detail
    # a conversion a step states: 60 seconds in a minute, 60 minutes in an hour
    josh = "The device records the temperature every 5 seconds for one hour."
    step = "There are 60 minutes in an hour and 60 seconds in a minute, so 60*60 = 3600 seconds."
    assert Checker((), josh).check(step).verdict == ENTAILED
    # a problem with no number states nothing; a value said in an earlier step, even one not
    # accepted (3 x 7 = 24 days, contradicted), is said
    assert Checker((), "Check your multiplication table.").check("9*9=81").verdict == ENTAILED
    weeks = Checker((), "How many hours are in 3 weeks?")
    assert weeks.check("3 × 7 = 24 days.").verdict == CONTRADICTED
    weeks.said("3 × 7 = 24 days.")
    assert weeks.check("24 × 24 = 576 hours.").verdict == ENTAILED
