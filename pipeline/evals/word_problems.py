"""Templated word problems, and the arithmetic drills mixed into training."""

from __future__ import annotations

import random

from pipeline.evals.knobs import Difficulty, maybe_checks, mul_line, operand

# ---------------------------------------------------------------- word problems

NAMES = ("Sam", "Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Ines")
ITEMS = ("apples", "pencils", "stickers", "marbles", "cards", "books", "shells", "coins")


def gen_word(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    template = rng.randrange(4)
    steps: list[str] = []
    checks: list[str] = []
    if template == 0:  # has, buys, gives away, ...
        v = operand(rng, diff.digits)
        parts = [f"{name} has {v} {item}."]
        for _ in range(diff.steps):
            if rng.random() < 0.5 or v < 2:
                b = operand(rng, diff.digits)
                parts.append(f"{name} gets {b} more.")
                steps.append(f"{v} + {b} = {v + b}")
                checks.append(f"{v + b} - {b} = {v}")
                v += b
            else:
                b = rng.randint(1, min(v - 1, 10**diff.digits - 1))
                parts.append(f"{name} gives away {b}.")
                steps.append(f"{v} - {b} = {v - b}")
                checks.append(f"{v - b} + {b} = {v}")
                v -= b
        question = " ".join(parts) + f" How many {item} does {name} have now?"
    elif template == 1:  # boxes of items, then extra / removed
        per, boxes = rng.randint(2, 12 if diff.digits > 1 else 9), rng.randint(2, 9)
        v = per * boxes
        parts = [f"A box holds {per} {item}.", f"{name} buys {boxes} boxes."]
        steps.append(mul_line(per, boxes))
        checks.append(f"{v} / {boxes} = {per}")
        for _ in range(diff.steps - 1):
            if v < 2:
                break
            b = rng.randint(1, min(v - 1, 10**diff.digits - 1))
            parts.append(f"{name} loses {b} of them.")
            steps.append(f"{v} - {b} = {v - b}")
            v -= b
        question = " ".join(parts) + f" How many {item} does {name} have?"
    elif template == 2:  # share equally, optionally after collecting more
        kids, each = rng.randint(2, 9), rng.randint(2, 12)
        total = kids * each
        if diff.steps >= 2 and total > 2:
            first = rng.randint(1, total - 1)
            question = (
                f"{name} has {first} {item} and finds {total - first} more. "
                f"{name} shares them equally among {kids} friends. How many {item} does each get?"
            )
            steps.append(f"{first} + {total - first} = {total}")
        else:
            question = (
                f"{name} shares {total} {item} equally among {kids} friends. "
                f"How many {item} does each friend get?"
            )
        steps.append(f"{total} / {kids} = {each}")
        checks.append(f"{each} * {kids} = {total}")
        v = each
    else:  # price, quantity, discount in percent
        price = rng.randint(1, 9) * 10
        qty = rng.randint(1, 3) if diff.steps > 1 else 1
        pct = rng.choice((10, 20, 50))
        cost = price * qty
        if qty > 1:
            steps.append(mul_line(price, qty))
        if cost * pct % 100:
            pct = 10 if cost % 10 == 0 else 50
        off = cost * pct // 100
        steps.append(f"{cost} * {pct} / 100 = {off}")
        steps.append(f"{cost} - {off} = {cost - off}")
        checks.append(f"{cost - off} + {off} = {cost}")
        what = "a lamp" if qty == 1 else f"{qty} lamps"
        question = (
            f"A lamp costs {price} dollars. {name} buys {what} with {pct}% off. "
            f"How many dollars does {name} pay?"
        )
        v = cost - off
    return question, steps + maybe_checks(rng, checks), str(v), []


# ---------------------------------------------------------------- drills (arithmetic practice)


def gen_drill(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    op = rng.choice("+-**/")
    if op == "+":
        a, b = operand(rng, diff.digits), operand(rng, diff.digits)
        line = f"{a} + {b} = {a + b}"
        v = a + b
    elif op == "-":
        a = operand(rng, diff.digits, low=2)
        b = rng.randint(1, a)
        line, v = f"{a} - {b} = {a - b}", a - b
    elif op == "*":
        a, b = operand(rng, min(diff.digits, 2)), rng.randint(2, 9)
        if rng.random() < 0.5:
            a, b = b, a
        line, v = mul_line(a, b), a * b
    else:
        b, q = rng.randint(2, 9), rng.randint(1, 12)
        line, v = f"{b * q} / {b} = {q}", q
    question = line.split(" = ")[0]
    return question, [line], str(v), []
