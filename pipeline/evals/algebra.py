"""Arithmetic chains, linear equations in one variable, 2x2 linear systems."""

from __future__ import annotations

import random

from pipeline.evals.knobs import MAX_VALUE, Difficulty, maybe_checks, mul_line, operand

# ---------------------------------------------------------------- arithmetic chains


def gen_arith(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    v = operand(rng, diff.digits)
    expr, last_low = str(v), False  # last_low: the top-level operator is + or -
    steps: list[str] = []
    checks: list[str] = []
    while len(steps) < diff.steps:
        op = rng.choice("+-*/")
        if op == "+":
            b = operand(rng, diff.digits)
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
    return question, steps + maybe_checks(rng, checks), str(v), []


# ---------------------------------------------------------------- linear equations


def _coef(a: int, var: str) -> str:
    return var if a == 1 else f"{a}{var}"


def gen_linear(rng: random.Random, diff: Difficulty) -> tuple[str, list[str], str, list[str]]:
    x = rng.randint(1, 9 if diff.digits == 1 else 15)
    form = min(diff.steps, 3)
    steps: list[str] = []
    if form == 1:  # x + b = c  or  x - b = c
        b = operand(rng, diff.digits)
        if rng.random() < 0.5 or b >= x:
            eq = f"x + {b} = {x + b}"
            steps.append(f"x = {x + b} - {b} = {x}")
        else:
            eq = f"x - {b} = {x - b}"
            steps.append(f"x = {x - b} + {b} = {x}")
        check = f"{x} + {b} = {x + b}" if "+" in eq else f"{x} - {b} = {x - b}"
    elif form == 2:  # ax + b = c  or  ax - b = c
        a = rng.randint(2, 9)
        b = operand(rng, diff.digits)
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
    return question, steps + maybe_checks(rng, [check]), str(x), [eq]


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
    return question, steps + maybe_checks(rng, checks), answer, [eq1, eq2]
