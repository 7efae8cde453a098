"""The R1-style reasoner's broader problem families (issue 21), beside the tiny reasoner's.

* `product`: two-digit by two-digit products, solved by splitting one factor
  (`23 * 47 = 23 * 40 + 23 * 7 = 920 + 161 = 1081`);
* `signed`: arithmetic chains that cross zero (negative numbers);
* `story`: multi-step word problems in varied wording (shopping and change, rates and time,
  recipes scaled, savings by week, sharing after buying), 2-4 operations.

Each generator returns (question, gold steps, answer, premises) in the step format of
docs/step-format.md, so the tiny reasoner's scorer, the verifier and the R1-style trace writer
(`r1_style.py`) read them like the other families. Linear equations and 2x2 systems come from
`algebra.py` at the `standard` level.
"""

from __future__ import annotations

import random

from pipeline.evals.knobs import Difficulty

NAMES = ("Priya", "Tom", "Aisha", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana")


def gen_product(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    a, b = rng.randint(12, 99), rng.randint(12, 99)
    tens, units = b - b % 10, b % 10
    if units == 0:
        steps = [f"{a} * {b} = {a} * {tens // 10} * 10 = {a * tens // 10} * 10 = {a * b}"]
    else:
        steps = [
            f"{a} * {b} = {a} * {tens} + {a} * {units}",
            f"{a} * {tens} = {a * tens}",
            f"{a} * {units} = {a * units}",
            f"{a * tens} + {a * units} = {a * b}",
        ]
    wording = rng.choice(("Compute {a} * {b}.", "What is {a} * {b}?", "Calculate {a} * {b}."))
    return wording.format(a=a, b=b), steps, str(a * b), []


def gen_signed(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    v = rng.randint(-20, 20)
    expr, steps = str(v), []
    for _ in range(max(2, diff.steps)):
        op = rng.choice("+-")
        b = rng.randint(1, 30)
        new = v + b if op == "+" else v - b
        steps.append(f"{_paren(v)} {op} {b} = {new}")
        expr = f"{expr} {op} {b}"
        v = new
    if v >= 0 and rng.random() < 0.7:  # make sure most chains end below zero
        b = v + rng.randint(1, 15)
        steps.append(f"{v} - {b} = {v - b}")
        expr, v = f"{expr} - {b}", v - b
    return f"Compute {expr}.", steps, str(v), []


def _paren(v: int) -> str:
    return f"({v})" if v < 0 else str(v)


def gen_story(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    name = rng.choice(NAMES)
    kind = rng.randrange(5)
    if kind == 0:  # shopping and change
        n, price = rng.randint(2, 9), rng.randint(3, 15)
        cost = n * price
        paid = cost + rng.randint(1, 30)
        question = (f"{name} buys {n} notebooks at {price} dollars each and pays with "
                    f"{paid} dollars. How much change does {name} get?")  # fmt: skip
        steps = [f"{n} * {price} = {cost}", f"{paid} - {cost} = {paid - cost}"]
        return question, steps, str(paid - cost), []
    if kind == 1:  # rate and time
        speed, hours, extra = rng.randint(20, 90), rng.randint(2, 6), rng.randint(5, 60)
        d = speed * hours
        question = (f"A train travels at {speed} km per hour for {hours} hours, then "
                    f"{extra} km more. How far does it travel in all?")  # fmt: skip
        return (
            question,
            [f"{speed} * {hours} = {d}", f"{d} + {extra} = {d + extra}"],
            str(d + extra),
            [],
        )
    if kind == 2:  # recipe scaled
        per, batches = rng.randint(2, 12), rng.randint(2, 8)
        total = per * batches
        used = rng.randint(1, total - 1)
        question = (
            f"A recipe needs {per} eggs per batch. {name} makes {batches} batches and has "
            f"already cracked {used} eggs. How many more eggs are needed?"
        )
        steps = [f"{per} * {batches} = {total}", f"{total} - {used} = {total - used}"]
        return question, steps, str(total - used), []
    if kind == 3:  # savings by week
        start, weekly, weeks = rng.randint(5, 50), rng.randint(3, 20), rng.randint(2, 8)
        saved = weekly * weeks
        spent = rng.randint(1, start + saved - 1)
        question = (f"{name} has {start} dollars and saves {weekly} dollars a week for "
                    f"{weeks} weeks, then spends {spent} dollars. How much is left?")  # fmt: skip
        steps = [
            f"{weekly} * {weeks} = {saved}",
            f"{start} + {saved} = {start + saved}",
            f"{start + saved} - {spent} = {start + saved - spent}",
        ]
        return question, steps, str(start + saved - spent), []
    # sharing after buying more
    kids, each = rng.randint(2, 9), rng.randint(2, 12)
    total = kids * each
    first = rng.randint(1, total - 1)
    question = (f"{name} has {first} stickers and buys {total - first} more, then shares "
                f"them equally among {kids} friends. How many does each friend get?")  # fmt: skip
    steps = [f"{first} + {total - first} = {total}", f"{total} / {kids} = {each}"]
    return question, steps, str(each), []
