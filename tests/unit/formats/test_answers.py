"""The generic answer finder: each style, priorities, light normalization."""

import pytest

from pipeline.formats import find_answer
from pipeline.formats.answers import (
    answer_after,
    closing_brace,
    has_answer,
    normalize,
    until_closing_brace,
)

TABLE = [
    # boxed
    ("So the result is $\\boxed{9}$.", "9"),
    ("\\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("$\\boxed{x = 5}$", "x = 5"),
    ("First \\boxed{3}, then on reflection \\boxed{4}.", "4"),
    ("\\fbox{12}", "12"),
    ("\\boxed {42}", "42"),
    ("\\boxed{\\text{blue}}", "blue"),
    ("\\boxed{1,200}", "1200"),
    ("\\boxed{(1, 2)}", "(1, 2)"),
    ("The answer is 7, or maybe \\boxed{8}", "8"),  # boxed beats stated, even earlier
    ("\\boxed{8}\n\nThe answer is 7.", "8"),
    # stated
    ("The answer is 3.5.", "3.5"),
    ("The answer is 7. Let me know if you need more.", "7"),
    ("So the final answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("the answer is: 12 apples.", "12 apples"),
    ("The answer is x = 5.", "x = 5"),
    ("The answer is \\(42\\).", "42"),
    ("Final Answer: 17", "17"),
    ("Final Answer: The final answer is 6. I hope it is correct.", "6"),
    ("Answer: x = 4, y = 7", "x = 4, y = 7"),
    ("Answer: 5\nAnswer: 6", "6"),
    ("**Answer:** 72", "72"),
    ("**Answer**: 72", "72"),
    ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72"),
    ("#### 1,200", "1200"),
    ("The answer is 3.\n#### 4", "4"),  # the last stated one wins
    ("The answer is \\text{Tuesday}.", "Tuesday"),
    ("The answer is $$-2$$.", "-2"),
    # bold (a last resort)
    ("She has **42** apples.", "42"),
    ("**Step 1:** add.\n\nThe total is **42**.", "42"),
    ("**Step 1:** add 2 and 3.", None),
    # none
    ("I am not sure.", None),
    ("", None),
    ("The answer is \\boxed{7", None),  # cut off: never half an answer
    ("Answer:", None),
]


@pytest.mark.parametrize(("text", "expected"), TABLE)
def test_answer_table(text, expected):
    assert find_answer(text) == expected


def test_the_last_boxed_wins_in_a_long_text():
    text = "Try $\\boxed{2}$?\n\nNo, recompute: $2 + 2 = 4$.\n\nThe answer is $\\boxed{4}$."
    assert find_answer(text) == "4"


def test_nested_boxed_gives_the_innermost():
    assert find_answer("\\boxed{\\boxed{5}}") == "5"


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("  $5$. ", "5"),
        ("\\(x = 5\\)", "x = 5"),
        ("\\[ 7 \\]", "7"),
        ("\\text{red}", "red"),
        ("\\text{a} and \\text{b}", "\\text{a} and \\text{b}"),
        ("$a$ and $b$", "$a$ and $b$"),
        ("**7**", "7"),
        ("3.5", "3.5"),
        ("12,345,678", "12345678"),
        ("1,2", "1,2"),
        ("...", "..."),
    ],
)
def test_normalize(raw, norm):
    assert normalize(raw) == norm


def test_has_answer_ignores_bold():
    assert has_answer("The answer is 7.")
    assert has_answer("so \\boxed{7}")
    assert not has_answer("She has **7** apples.")


def test_answer_after_takes_the_answer_the_cue_asked_for():
    assert answer_after("\n\nThe answer is", " 7.\n\nBut the answer is 8.") == "7"
    assert answer_after("\n\nThe answer is", " $\\boxed{3}$.") == "3"
    assert answer_after("\n\nThe answer is", "") is None
    assert answer_after("Answer: 5\nThe answer is", " 6.") == "6"  # not the cue's own text


def test_until_closing_brace():
    assert until_closing_brace("\\frac{1}{2}} and more") == "\\frac{1}{2}"
    assert until_closing_brace("9}.") == "9"
    assert until_closing_brace("\\frac{1}{2") is None
    assert until_closing_brace("}") is None


def test_closing_brace():
    assert closing_brace("a{b}c}d") == 5
    assert closing_brace("{") is None
