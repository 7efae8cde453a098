"""Difficulty knobs, their training mixtures ("levels"), and helpers shared by the families."""

from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.evals.problems import CHECK_PREFIX

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


def level_difficulty(rng: random.Random, level: str) -> Difficulty:
    digits, steps = LEVELS[level]
    return Difficulty(digits=rng.choice(digits), steps=rng.choice(steps))


def operand(rng: random.Random, digits: int, low: int = 1) -> int:
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


def maybe_checks(rng: random.Random, checks: list[str]) -> list[str]:
    """Reasoning models re-check their work; the traces do too, some of the time."""
    r = rng.random()
    if not checks or r >= 0.3:
        return []
    if r < 0.08 and len(checks) > 1:
        return [CHECK_PREFIX + c for c in rng.sample(checks, 2)]
    return [CHECK_PREFIX + rng.choice(checks)]
