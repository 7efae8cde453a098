"""Seeded task generators: arithmetic chains, linear equations, 2x2 systems, word problems.

Every problem comes with its gold steps (one equation chain per line, see docs/step-format.md),
its gold answer and the premises a verifier may assume. A problem is a pure function of
(family, seed, index, difficulty), so the same seed always gives the same problems.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.evals.problems import CHECK_PREFIX, TRAIN_SEED_BASE, Problem, split_of

MAX_VALUE = 200  # arithmetic chains stay in [0, MAX_VALUE]: small numbers are learnable


@dataclass(frozen=True, slots=True)
class Difficulty:
    """Knobs: `digits` bounds operand size (1-3), `steps` the number of operations (1-4)."""

    digits: int = 2
    steps: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 3:
            raise ValueError(f"digits must be 1..3, got {self.digits}")
        if not 1 <= self.steps <= 4:
            raise ValueError(f"steps must be 1..4, got {self.steps}")


# Difficulty mixtures ("levels"): the knobs are drawn per problem. The shipped model's training
# distribution, and so the held-out "in-distribution" eval, is DEFAULT_LEVEL.
LEVELS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "standard": ((1, 2, 2), (1, 2, 2, 3)),  # digits 1 or 2 (2/3 two-digit), steps 1-3
    "easy": ((1, 1, 1, 2), (1, 2, 2, 3)),  # digits mostly 1 (3/4), steps 1-3
}
DEFAULT_LEVEL = "easy"  # what the bundled tiny reasoner was trained on last


def _level_difficulty(rng: random.Random, level: str) -> Difficulty:
    digits, steps = LEVELS[level]
    return Difficulty(digits=rng.choice(digits), steps=rng.choice(steps))


def _operand(rng: random.Random, digits: int, low: int = 1) -> int:
    # Skewed toward small numbers: one digit half of the time, whatever the knob says.
    d = rng.randint(1, digits) if rng.random() < 0.5 else digits
    return rng.randint(max(low, 10 ** (d - 1) if d > 1 else low), 10**d - 1)


def mul_line(a: int, b: int) -> str:
    """`a * b = p`, column by column when one factor has two digits and the other one."""
    p = a * b
    big, small = (a, b) if a >= b else (b, a)
    if big >= 10 and small < 10 and big % 10 and big < 100:
        tens, units = big - big % 10, big % 10
        if a >= b:
            parts = f"{tens} * {small} + {units} * {small}"
        else:
            parts = f"{small} * {tens} + {small} * {units}"
        return f"{a} * {b} = {parts} = {tens * small} + {units * small} = {p}"
    return f"{a} * {b} = {p}"


def _maybe_checks(rng: random.Random, checks: list[str]) -> list[str]:
    """Reasoning models re-check their work; the traces do too, some of the time."""
    r = rng.random()
    if not checks or r >= 0.3:
        return []
    if r < 0.08 and len(checks) > 1:
        return [CHECK_PREFIX + c for c in rng.sample(checks, 2)]
    return [CHECK_PREFIX + rng.choice(checks)]


# ---------------------------------------------------------------- arithmetic chains


def gen_arith(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    v = _operand(rng, diff.digits)
    expr, last_low = str(v), False  # last_low: the top-level operator is + or -
    steps: list[str] = []
    checks: list[str] = []
    while len(steps) < diff.steps:
        op = rng.choice("+-*/")
        if op == "+":
            b = _operand(rng, diff.digits)
            if v + b > MAX_VALUE:
                continue
            new, line, check = v + b, f"{v} + {b} = {v + b}", f"{v + b} - {b} = {v}"
        elif op == "-":
            if v < 2:
                continue
            b = rng.randint(1, min(v, 10**diff.digits - 1))
            new, line, check = v - b, f"{v} - {b} = {v - b}", f"{v - b} + {b} = {v}"
        elif op == "*":
            b = rng.randint(2, 9)
            if v > 99 or v * b > MAX_VALUE:
                continue
            new, line, check = v * b, mul_line(v, b), f"{v * b} / {b} = {v}"
        else:
            divisors = [d for d in range(2, 10) if v % d == 0 and v // d <= 20]
            if not divisors:
                continue
            b = rng.choice(divisors)
            new, line, check = v // b, f"{v} / {b} = {v // b}", f"{v // b} * {b} = {v}"
        if op in "*/" and last_low:
            expr = f"({expr})"
        expr = f"{expr} {op} {b}"
        last_low = op in "+-"
        v = new
        steps.append(line)
        checks.append(check)
    question = f"Compute {expr}."
    return question, steps + _maybe_checks(rng, checks), str(v), []


# ---------------------------------------------------------------- linear equations


def _coef(a: int, var: str) -> str:
    return var if a == 1 else f"{a}{var}"


def gen_linear(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    x = rng.randint(1, 9 if diff.digits == 1 else 15)
    form = min(diff.steps, 3)
    steps: list[str] = []
    if form == 1:  # x + b = c  or  x - b = c
        b = _operand(rng, diff.digits)
        if rng.random() < 0.5 or b >= x:
            eq = f"x + {b} = {x + b}"
            steps.append(f"x = {x + b} - {b} = {x}")
        else:
            eq = f"x - {b} = {x - b}"
            steps.append(f"x = {x - b} + {b} = {x}")
        check = f"{x} + {b} = {x + b}" if "+" in eq else f"{x} - {b} = {x - b}"
    elif form == 2:  # ax + b = c  or  ax - b = c
        a = rng.randint(2, 9)
        b = _operand(rng, diff.digits)
        ax = a * x
        if rng.random() < 0.5 or b >= ax:
            eq, c = f"{a}x + {b} = {ax + b}", ax + b
            steps.append(f"{a}x = {c} - {b} = {ax}")
            check = f"{a} * {x} + {b} = {c}"
        else:
            eq, c = f"{a}x - {b} = {ax - b}", ax - b
            steps.append(f"{a}x = {c} + {b} = {ax}")
            check = f"{a} * {x} - {b} = {c}"
        steps.append(f"x = {ax} / {a} = {x}")
    else:  # a(x + b) = c
        a = rng.randint(2, 9)
        b = rng.randint(1, 9 if diff.digits == 1 else 20)
        c = a * (x + b)
        eq = f"{a}(x + {b}) = {c}"
        steps.append(f"x + {b} = {c} / {a} = {x + b}")
        steps.append(f"x = {x + b} - {b} = {x}")
        check = f"{a} * ({x} + {b}) = {c}"
    if rng.random() < 0.5:  # either side order
        lhs, rhs = eq.split(" = ")
        eq = f"{rhs} = {lhs}"
    question = f"Solve for x: {eq}."
    return question, steps + _maybe_checks(rng, [check]), str(x), [eq]


# ---------------------------------------------------------------- 2x2 linear systems


def _lin2(a: int, b: int) -> str:
    """Render `ax + by` / `ax - by` with implicit multiplication."""
    sign = "+" if b > 0 else "-"
    return f"{_coef(a, 'x')} {sign} {_coef(abs(b), 'y')}"


def gen_system(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    top = 9 if diff.digits == 1 else 15
    while True:
        x, y = rng.randint(1, top), rng.randint(1, top)
        a1, a2 = rng.randint(1, 4), rng.randint(1, 4)
        b = rng.randint(1, 3)
        adding = rng.random() < 0.5  # eq2 has -by: add the equations; else subtract them
        b2 = -b if adding else b
        c1, c2 = a1 * x + b * y, a2 * x + b2 * y
        if c2 <= 0 or (not adding and a1 == a2):
            continue
        break
    eq1, eq2 = f"{_lin2(a1, b)} = {c1}", f"{_lin2(a2, b2)} = {c2}"
    steps: list[str] = []
    if adding:
        a, s = a1 + a2, c1 + c2
        steps.append(f"{_coef(a, 'x')} = {c1} + {c2} = {s}")
    else:
        hi, lo = (c1, c2) if a1 > a2 else (c2, c1)
        a, s = abs(a1 - a2), hi - lo
        steps.append(f"{_coef(a, 'x')} = {hi} - {lo} = {s}")
    if a != 1:
        steps.append(f"x = {s} / {a} = {x}")
    p = a1 * x
    if a1 != 1:
        steps.append(mul_line(a1, x))
    if b == 1:
        steps.append(f"y = {c1} - {p} = {y}")
    else:
        steps.append(f"{b}y = {c1} - {p} = {b * y}")
        steps.append(f"y = {b * y} / {b} = {y}")
    checks = [f"{a2} * {x} {'+' if b2 > 0 else '-'} {abs(b2)} * {y} = {c2}"]
    question = f"Solve the system: {eq1}, {eq2}."
    answer = f"x = {x}, y = {y}"
    return question, steps + _maybe_checks(rng, checks), answer, [eq1, eq2]


# ---------------------------------------------------------------- word problems

NAMES = ("Sam", "Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Ines")
ITEMS = ("apples", "pencils", "stickers", "marbles", "cards", "books", "shells", "coins")


def gen_word(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    template = rng.randrange(4)
    steps: list[str] = []
    checks: list[str] = []
    if template == 0:  # has, buys, gives away, ...
        v = _operand(rng, diff.digits)
        parts = [f"{name} has {v} {item}."]
        for _ in range(diff.steps):
            if rng.random() < 0.5 or v < 2:
                b = _operand(rng, diff.digits)
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
    return question, steps + _maybe_checks(rng, checks), str(v), []


# ---------------------------------------------------------------- drills (arithmetic practice)


def gen_drill(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    op = rng.choice("+-**/")
    if op == "+":
        a, b = _operand(rng, diff.digits), _operand(rng, diff.digits)
        line = f"{a} + {b} = {a + b}"
        v = a + b
    elif op == "-":
        a = _operand(rng, diff.digits, low=2)
        b = rng.randint(1, a)
        line, v = f"{a} - {b} = {a - b}", a - b
    elif op == "*":
        a, b = _operand(rng, min(diff.digits, 2)), rng.randint(2, 9)
        if rng.random() < 0.5:
            a, b = b, a
        line, v = mul_line(a, b), a * b
    else:
        b, q = rng.randint(2, 9), rng.randint(1, 12)
        line, v = f"{b * q} / {b} = {q}", q
    question = line.split(" = ")[0]
    return question, [line], str(v), []


Generator = Callable[[random.Random, Difficulty], tuple[str, list[str], str, list[str]]]

FAMILIES: dict[str, Generator] = {
    "arith": gen_arith,
    "linear": gen_linear,
    "system": gen_system,
    "word": gen_word,
    "drill": gen_drill,
}
# What "in-distribution" means for the held-out eval: the four problem families.
EVAL_FAMILIES = ("arith", "linear", "system", "word")


def make_problem(
    family: str,
    seed: int,
    index: int,
    difficulty: Difficulty | None = None,
    level: str = DEFAULT_LEVEL,
) -> Problem:
    """The problem at (family, seed, index); a pure function of its arguments. Without a
    `difficulty`, the knobs are drawn from the `level` mixture."""
    gen = FAMILIES[family]
    rng = random.Random(f"{family}:{seed}:{index}")
    if level not in LEVELS:
        raise KeyError(f"unknown level {level!r}; known: {', '.join(LEVELS)}")
    diff = difficulty or _level_difficulty(rng, level)
    question, steps, answer, premises = gen(rng, diff)
    return Problem(
        family=family,
        question=question,
        steps=tuple(steps),
        answer=answer,
        premises=tuple(premises),
        seed=seed,
        index=index,
        meta={"digits": diff.digits, "steps": diff.steps},
    )


def generate(
    family: str,
    n: int,
    seed: int = 0,
    split: str | None = "test",
    difficulty: Difficulty | None = None,
    level: str = DEFAULT_LEVEL,
) -> list[Problem]:
    """`n` distinct problems of one family. split='test' needs seed < TRAIN_SEED_BASE and keeps
    only held-out questions; 'train' needs seed >= TRAIN_SEED_BASE; None keeps everything."""
    if family not in FAMILIES:
        raise KeyError(f"unknown task family {family!r}; known: {', '.join(FAMILIES)}")
    if split == "test" and seed >= TRAIN_SEED_BASE:
        raise ValueError(f"held-out seeds are < {TRAIN_SEED_BASE}, got {seed}")
    if split == "train" and seed < TRAIN_SEED_BASE:
        raise ValueError(f"training seeds are >= {TRAIN_SEED_BASE}, got {seed}")
    out: list[Problem] = []
    seen: set[str] = set()
    index = 0
    while len(out) < n:
        if index > 200 * n + 1000:
            raise RuntimeError(f"could not draw {n} distinct {family} problems")
        p = make_problem(family, seed, index, difficulty, level)
        index += 1
        if p.question in seen or (split is not None and split_of(p.question) != split):
            continue
        seen.add(p.question)
        out.append(p)
    return out
