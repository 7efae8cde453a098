"""Seeded task generators: arithmetic chains, linear equations, 2x2 systems, word problems.

Every problem comes with its gold steps (one equation chain per line, see docs/step-format.md),
its gold answer and the premises a verifier may assume. A problem is a pure function of
(family, seed, index, difficulty), so the same seed always gives the same problems.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from pipeline.evals.algebra import gen_arith, gen_linear, gen_system
from pipeline.evals.curriculum import gen_product, gen_signed, gen_story
from pipeline.evals.knobs import DEFAULT_LEVEL, LEVELS, Difficulty, level_difficulty, mul_line
from pipeline.evals.problems import TRAIN_SEED_BASE, Problem, split_of
from pipeline.evals.word_problems import gen_drill, gen_word

Generator = Callable[[random.Random, Difficulty], tuple[str, list[str], str, list[str]]]

FAMILIES: dict[str, Generator] = {
    "arith": gen_arith,
    "linear": gen_linear,
    "system": gen_system,
    "word": gen_word,
    "drill": gen_drill,
    # The R1-style reasoner's broader curriculum (curriculum.py), beside the families above.
    "product": gen_product,
    "signed": gen_signed,
    "story": gen_story,
}
# What "in-distribution" means for the held-out eval: the four problem families.
EVAL_FAMILIES = ("arith", "linear", "system", "word")
# The R1-style reasoner's: its training mix and its held-out eval (`--tasks broad`).
BROAD_FAMILIES = ("arith", "product", "signed", "linear", "system", "word", "story")
__all__ = [
    "DEFAULT_LEVEL",
    "EVAL_FAMILIES",
    "FAMILIES",
    "LEVELS",
    "Difficulty",
    "generate",
    "make_problem",
    "mul_line",
]


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
    diff = difficulty or level_difficulty(rng, level)
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
