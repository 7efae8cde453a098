"""Which written values verify mode `repair` replaces, and with what (pure: no engine). The
texts are written the ways models write arithmetic: prose, LaTeX, markdown lists, GSM8K's
`<<a*b=c>>` annotations, money and thousands separators."""

import pytest

from pipeline.verify.repair import closed_at, find_repair


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
        "Now 7 / 3 = 2 and",  # the right value has no finite decimal: left to the checker
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
    if not text.rstrip().endswith(("+", "\\times")):  # a dangling operator: no claim at all
        assert find_repair(text, final=True) is not None  # a finished step is closed
