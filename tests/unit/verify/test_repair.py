"""Which written values verify mode `repair` replaces, and with what (pure: no engine). The
texts are written the ways models write arithmetic: prose, LaTeX, markdown lists, GSM8K's
`<<a*b=c>>` annotations, money and thousands separators."""

from fractions import Fraction

import pytest

from pipeline.verify.repair import closed_at, find_repair, problem_values


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        ("Now 88 * 40 = 3120.", "3120", "3520"),
        ("Then (-50) + 2 = -33.", "-33", "-48"),
        ("Which means 60 - 63 = -19.", "-19", "-3"),
        ("Which means $36 \\times 4 = 132$.", "132", "144"),
        ("Then \\(88 \\times 40 = 3640\\). That gives 88 * 4 = 344.", "3640", "3520"),
        ("First, $x + 9 = 55 \\div 5 = 10$.", "10", "11"),  # the pair without the unknown
        ("Step by step:\n- 64 * 4 = 248\n- 248 + 59 = 297", "248", "256"),
        ("She makes <<48/2=25>>25 clips in May.", "25", "24"),
        ("He pays 3 * $4 = $13 in total.", "13", "12"),
        ("1,000 + 2,500 = 3,600 dollars", "3,600", "3,500"),
        ("10 / 4 = 2.6 hours", "2.6", "2.5"),
        ("<think>\nSo 7 * 8 = 54.\n</think>", "54", "56"),
        # no finite decimal: written rounded, as people write it (the checker: as meant)
        ("Now 7 / 3 = 2 and", "2", "2.33"),
        ("So -1 / 3 = -2, then", "-2", "-0.33"),
        ("Each gets 10,000 / 3 = 3,000 dollars", "3,000", "3,333.33"),
        ("The share is 1 / 300 = 0.03.", "0.03", "0.003"),
        ("Then 22 / 7 = 3.5 metres", "3.5", "3.14"),
    ],
)
def test_a_wrong_value_is_found_with_the_right_one(text, old, new):
    r = find_repair(text, final=True)
    assert r is not None and (r.old, r.new) == (old, new)
    assert text[r.span[0] : r.span[1]] == old
    # Once replaced, the value is right: a text with two wrong values gives the second next.
    fixed = text[: r.span[0]] + r.new + text[r.span[1] :]
    again = find_repair(fixed, final=True)
    assert again is None or again.span[0] > r.span[0] + len(r.new)


@pytest.mark.parametrize(
    "text",
    [
        "So 60 - 63 = -3.",  # right
        "25 / 3 = 8.33 so",  # rounded as meant
        "x = 22 / 2 = 12",  # ... and the pair with an unknown is the checker's; this one is
        "15 teeth / 30 teeth * 100% = 40%",  # a percent value: not a plain number
        "1 hour + 30 minutes = 90 minutes",  # right once its units are converted
        "The meeting is at 3:15 = quarter past",  # not arithmetic
        "x + 2 = 7",  # an equation, not a computation
    ],
)
def test_what_is_not_repaired(text):
    r = find_repair(text, final=True)
    if text.startswith("x = 22"):
        assert r is not None and (r.old, r.new) == ("12", "11")
    else:
        assert r is None


@pytest.mark.parametrize(
    ("text", "closed"),
    [
        ("Now 88 * 40 = 3120", False),  # more digits may come
        ("Now 88 * 40 = 3120 ", False),  # an operator may come
        ("Now 88 * 40 = 3120 +", False),
        ("Now 88 * 40 = 3120 \\times", False),
        ("Now 88 * 40 = 3120 \\", False),  # a LaTeX command still being written
        ("Now 88 * 40 = 3120 \\ti", False),
        ("Now 88 * 40 = 3120 ti", False),  # `times`, still being written
        ("Now 88 * 40 = 3120 minu", False),
        ("Now 88 * 40 = 3120 minutes", True),
        ("Now 88 * 40 = 3120.", False),  # `3120.5`?
        ("Now 88 * 40 = 3120. ", True),
        ("Now 88 * 40 = 3120 apples", True),
        ("Now 88 * 40 = 3120,", True),
        ("Now 88 * 40 = 3120$", True),
        ("<<88*40=3120>>", True),
        ("Now 88 * 40 = 3120\n", True),
    ],
)
def test_a_value_counts_only_once_closed(text, closed):
    end = text.index("3120") + 4
    assert closed_at(text, end) is closed
    assert (find_repair(text) is not None) is closed
    if not text.rstrip().endswith(("+", "\\times", "\\ti", "\\")):  # a dangling operator
        assert find_repair(text, final=True) is not None  # a finished step is closed


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        # A chain's wrong link: the right side's one number whose change makes the claim hold.
        ("27 * 50 = 27 * 5 * 10 = 145 * 10 = 1450.", "145", "135"),
        ("$27 \\times 5 \\times 10 = 145 \\times 10$ so", "145", "135"),
        # Distributed terms: the one right-side term unlike its left-side counterpart.
        ("12 * 15 = 12 * 10 + 12 * 5 = 120 + 70 = 190, so", "70", "60"),
        ("So 36 * 4 = 30 * 4 + 6 * 4 = 120 + 25 = 145 and", "25", "24"),
    ],
)
def test_a_wrong_number_inside_a_right_side_expression_is_repaired(text, old, new):
    r = find_repair(text)
    assert r is not None and (r.old, r.new) == (old, new)
    assert text[r.span[0] : r.span[1]] == old
    fixed = text[: r.span[0]] + r.new + text[r.span[1] :]
    # The repaired claim holds: what is still wrong (the model's later links, which decode
    # discards with the rollback) comes after the repaired number.
    again = find_repair(fixed, final=True)
    assert again is None or again.span[0] > r.span[1]


@pytest.mark.parametrize(
    "text",
    [
        "So 58 × 16 = 52 × 10 + 52 × 6. Then",  # no one slip makes it hold: a rewrite
        "3 * 4 = 2 + 5 = 7 and",  # one-digit numbers: any would do, none is a slip
        "Which is 25% of 80 = 10 * 2 and",  # a percent's hidden 100: numbers unlike as written
        "27 * 5 * 10 = 145 * 10",  # not closed: ` * 10` may go on
        "8 * 9 = 70 + 3 and",  # two numbers, each a slip away: ambiguous
    ],
)
def test_an_ambiguous_or_open_right_side_is_not_repaired(text):
    assert find_repair(text) is None


# -- claims on the unknowns the problem's own equations fix ----------------------------------


@pytest.mark.parametrize(
    ("problem", "values"),
    [
        ("Solve 2x + 3 = 11.", {"x": 4}),
        ("Solve the system: 4x + y = 33, 2x - y = 3.", {"x": 6, "y": 9}),
        ("Solve $6x + 9 = 45$ for x.", {"x": 6}),
        ("If 3y - 4 = 2y + 1, what is y?", {"y": 5}),
        # a question's implied answer, a word problem, an underdetermined or impossible system
        ("Compute (3 + 8 + 9) / 4.", {}),
        ("Tom has 5 apples and buys 3 more. How many does he have?", {}),
        ("Solve x + y = 10.", {}),
        ("Solve the system: x + y = 1, x + y = 2.", {}),
    ],
)
def test_the_values_a_problem_fixes(problem, values):
    assert problem_values(problem) == {k: Fraction(v) for k, v in values.items()}


SOLVE = problem_values("Solve 2x + 3 = 11.")
SYSTEM = problem_values("Solve the system: 4x + y = 33, 2x - y = 3.")


@pytest.mark.parametrize(
    ("text", "values", "old", "new"),
    [
        ("So x = 7. Then", SOLVE, "7", "4"),
        ("Then 2x = 10, and", SOLVE, "10", "8"),
        ("Which means $x = 5$.", SOLVE, "5", "4"),
        ("Then y = 4, so 4x = 29", SYSTEM, "4", "9"),
        ("So 2x - y = 5, hence", SYSTEM, "5", "3"),
        # read as the checker reads a claim on unknowns: exactly, no rounding
        ("So x = 3.33 and", problem_values("Solve 3x = 10."), "3.33", "10/3"),
    ],
)
def test_a_wrong_value_of_a_fixed_unknown_is_repaired(text, values, old, new):
    repair = find_repair(text, values=values)
    assert repair is not None and (repair.old, repair.new) == (old, new)
    assert text[repair.span[0] : repair.span[1]] == old


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("So x = 7. Then", {}),  # the problem fixes nothing
        ("So z = 7. Then", SOLVE),  # an unknown of the solution's own
        ("So x = 7 - y, and", SYSTEM),  # unknowns on both sides: which number is wrong?
        ("So 2x = 11 + 3 = 14.", SOLVE),  # a wrong side that is an expression: the checker's
        ("To begin, $2x = 8 + 11 = 19$. Next,", SOLVE),  # (no running total on unknowns)
        ("Check x = 7: 2(7) + 3 = 17, no.", SOLVE),  # tried, not stated
        ("So x = 4 and then", SOLVE),  # right
    ],
)
def test_claims_on_unknowns_left_to_the_checker(text, values):
    assert find_repair(text, values=values) is None


ELIMINATE = "Solve the system: 3x + y = 22, 2x - y = 3."  # x = 5, y = 7


@pytest.mark.parametrize(
    ("problem", "text", "old", "new"),
    [
        # an elimination that added the equations and slipped the coefficient: 3x + 2x is 5x
        (ELIMINATE, "Let me start: 9x = 22 + 3 = 25.", "9x", "5x"),
        (ELIMINATE, "Let me start: 9x = 22 + 3 =", "9x", "5x"),  # closed by the next `=`
        (ELIMINATE, "First, $3x = 22 + 3$ so", "3x", "5x"),
        (ELIMINATE, "First, \\(4 \\cdot x = 22 + 3\\).", "4 \\cdot x", "5 \\cdot x"),
        (ELIMINATE, "Then 9 * x = 22 + 3, so", "9 * x", "5 * x"),
        # no coefficient written: one put in; one of 1: taken out
        ("Solve the system: 3x + y = 29, x + y = 19.", "To begin, x = 29 - 19 = 10.", "x", "2x"),
        ("Solve the system: 4x + 2y = 20, 3x + 2y = 18.", "Now $4x = 20 - 18 = 2$.", "4x", "x"),
        ("Solve the system: 4x + y = 51, x + y = 15.", "Steps:\n- 6x = 51 - 15\n- x", "6x", "3x"),
        ("Solve for x: 8x + 8 = 32.", "So 2y = 4 and 2x = 24 / 2 = 12.", "2x", "4x"),
    ],
)
def test_a_slipped_coefficient_of_a_fixed_unknown_is_repaired(problem, text, old, new):
    """The left side's coefficient is put right and the claim's text after it is kept (the
    numbers the model took from the problem are right)."""
    r = find_repair(text, values=problem_values(problem))
    assert r is not None and (r.old, r.new, r.keeps_rest) == (old, new, True)
    assert text[r.span[0] : r.span[1]] == old
    fixed = text[: r.span[0]] + r.new + text[r.span[1] :]
    assert find_repair(fixed, values=problem_values(problem)) is None


@pytest.mark.parametrize(
    ("problem", "text"),
    [
        (ELIMINATE, "Let me start: 9x = 22 + 3"),  # the right side may still go on
        (ELIMINATE, "Let me start: $x = 22 - 3 = 19$."),  # 19 / 5: no whole coefficient
        (ELIMINATE, "So 2x = 11 - y, hence"),  # an unknown on the right
        (ELIMINATE, "So 2x + y = 22 + 3, hence"),  # two unknowns on the left
        (ELIMINATE, "So -x = 22 - 3, hence"),  # a sign, not a coefficient
        (ELIMINATE, "So 5x = 22 + 3 = 25, hence"),  # right
        (ELIMINATE, "So 9z = 22 + 3, hence"),  # an unknown the problem does not fix
        (ELIMINATE, "So 9x = 22 - 30, hence"),  # a negative coefficient: no slip
        ("Compute 7 * 8.", "So 9x = 22 + 3, hence"),  # the problem fixes nothing
    ],
)
def test_what_no_coefficient_repairs(problem, text):
    r = find_repair(text, values=problem_values(problem))
    assert r is None or not r.keeps_rest
