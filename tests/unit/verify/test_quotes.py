"""The problem quoted wrong (issue 36, item 3): a restatement that changes one of the
problem's numbers, or turns one word into its opposite, is contradicted with the problem's
span; what solutions write right in the problem's words is not."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline.verify.checker import CONTRADICTED, ENTAILED, NO_CLAIM, Checker
from pipeline.verify.quotes import Quotes

LEMONS = (
    "Carlos is planting a lemon tree. The tree will cost $90 to plant. Each year it will grow "
    "7 lemons, which he can sell for $1.5 each. It costs $3 a year to water and feed the tree. "
    "How many years will it take before he starts earning money on the lemon tree?"
)
JEWELS = (
    "Siobhan has 2 fewer jewels than Aaron. Aaron has 5 more jewels than half of Raymond's "
    "jewels. If Raymond has 40 jewels, how many jewels does Siobhan have?"
)
ALARM = (
    "Greg has an alarm set to ring three times a day as a reminder. The first time it went off "
    "today, it rang four times. The second time it went off, it rang for three times as long "
    "as the first time. How many times did the alarm ring in all?"
)
RACE = (
    "Silvio was running a race that had 4 parts. The total length of the race was 74.5 "
    "kilometers. The first part of the race is 15.5 kilometers long. How many kilometers is "
    "the last part of the race?"
)


@pytest.mark.parametrize(
    ("problem", "step", "said", "wrote"),
    [
        # a number changed, the sentence cut short after it (R1-style restatements)
        (LEMONS, "Okay, let's see. Carlos is planting a lemon tree. The tree will cost $90 to "
         "plant. Each year it will grow 7 lemons, which he can sell for $1.", "1.5", "1"),
        # a number changed in the middle, written in words in the problem
        (ALARM, "The problem says: The first time it went off today, it rang five times.",
         "4", "5"),
        # an opposite word (the numbers all the same)
        (JEWELS, "Okay, so I need to work this out: Siobhan has 2 more jewels than Aaron.",
         "fewer", "more"),
        (ALARM, "The second time it went off, it rang for three times as long as the second "
         "time.", "first", "second"),
        # LaTeX and markdown around the quote change nothing
        (LEMONS, "**Restating:** It costs \\$5 a year to water and feed the tree.", "3", "5"),
        (LEMONS, "- It costs $5$ a year to water and feed the tree.", "3", "5"),
    ],
)  # fmt: skip
def test_a_misquote_of_the_problem_is_contradicted(problem, step, said, wrote):
    (m,) = Quotes(problem).misquotes(step)
    assert f"the problem says {said}" in m.detail and m.detail.endswith(f"as {wrote}")
    assert step[m.span[0] : m.span[1]] == m.text
    assert problem[m.source_span[0] : m.source_span[1]] == m.source_text

    v = Checker((), problem).check(step)
    assert v.verdict == CONTRADICTED
    (claim,) = [c for c in v.claims if c.kind == "quote"]
    assert claim.earlier_source == "the problem" and claim.earlier_span == m.source_span


@pytest.mark.parametrize(
    ("problem", "step"),
    [
        # the problem restated right: digits for words, trailing zeros, a percent as a fraction
        (ALARM, "The first time it went off today, it rang 4 times."),
        (LEMONS, "Each year it will grow seven lemons, which he can sell for $1.50 each."),
        ("Mark bought a TV with a discount of 20% on the price of $800 last week.",
         "Mark bought a TV with a discount of 0.2 on the price of $800 last week."),
        # how things stand after something happened, in the problem's words
        ("Tom has 5 apples in his big red basket at home.",
         "Now Tom has 8 apples in his big red basket at home."),
        # the problem's frame with two things changed: a sentence of its own
        (RACE, "The last part of the race is 16 kilometers."),
        ("Ms. Alice can grade 296 papers in 8 hours. How many papers can she grade in 11 hours?",
         "Ms. Alice can grade 407 papers in 11 hours."),
        # a quote that starts mid-sentence may be another clause's number
        ("At peak season, 6 packs of tuna fish are sold per hour, while in a low season 4 tuna "
         "packs are sold per hour.", "4 packs of tuna fish are sold per hour."),
        # a computation in the problem's words is a claim, not a quote
        (LEMONS, "Each year it will grow 7 lemons, which he can sell for 7 * 1.5 = $10.5."),
        # two sentences of the problem alike: which one is quoted is not known
        ("On Monday he reads 12 pages of his book. On Tuesday he reads 15 pages of his book.",
         "On Sunday he reads 20 pages of his book."),
    ],
)  # fmt: skip
def test_what_solutions_write_right_is_left_alone(problem, step):
    assert Quotes(problem).misquotes(step) == []


def test_a_step_with_no_quote_is_unchanged():
    checker = Checker((), LEMONS)
    assert checker.check("Okay, let's see.").verdict == NO_CLAIM
    assert checker.check("He earns 7 * 1.5 = 10.5 dollars a year.").verdict == ENTAILED


_DATA = Path(__file__).parents[3] / "bench" / "data" / "gsm8k" / "test_500.jsonl"
_NUMBER = re.compile(r"(?<![\w.,])\d+(?:\.\d+)?(?![\d.]|,\d)")


def test_gsm8k_problems_restated_whole_and_with_one_number_changed():
    """GSM8K's test problems (openai/grade-school-math, in bench/data): each restated whole is
    no misquote; each with one of its numbers changed mostly is (short sentences, and numbers
    with fewer than two of the problem's words beside them, are left alone)."""
    problems = [json.loads(line)["question"] for line in _DATA.read_text().splitlines()]
    changed = caught = 0
    for problem in problems:
        quotes = Quotes(problem)
        assert quotes.misquotes("Okay, let's see. " + problem) == [], problem
        for m in _NUMBER.finditer(problem):
            wrong = str(int(float(m.group())) + 3)
            step = "Okay, let's see. " + problem[: m.start()] + wrong + problem[m.end() :]
            changed += 1
            found = quotes.misquotes(step)
            caught += bool(found)
            assert all(f.detail.endswith(f"as {wrong}") for f in found), (problem, wrong)
    assert changed > 1500 and caught / changed > 0.9
