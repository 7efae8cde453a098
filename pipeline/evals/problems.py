"""The Problem record, the prompt format, and the train / held-out split."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

# Problem seeds below TRAIN_SEED_BASE are reserved for evaluation; training draws only from
# seeds >= TRAIN_SEED_BASE. On top of the seed split, every question text is hashed into a
# bucket: the "test" bucket (HELDOUT_BUCKETS of 16) is never used for training, so a held-out
# question can never appear verbatim in the training stream even where the problem space is
# small (one-digit operands).
TRAIN_SEED_BASE = 1_000_000
HASH_BUCKETS = 16
HELDOUT_BUCKETS = frozenset({0, 1})

ANSWER_PREFIX = "Answer: "
CHECK_PREFIX = "Check: "


@dataclass(frozen=True, slots=True)
class Problem:
    """One reasoning problem with its gold solution (one step per line)."""

    family: str
    question: str
    steps: tuple[str, ...]
    answer: str
    premises: tuple[str, ...] = ()
    seed: int = -1
    index: int = -1
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def solution(self) -> str:
        """Gold completion: the steps, then the answer line, newline-terminated."""
        return format_solution(self.steps, self.answer)


def format_prompt(problem: Problem | str) -> str:
    """The prompt the tiny reasoner was trained on: `Q: <question>` and a newline."""
    question = problem.question if isinstance(problem, Problem) else problem
    question = " ".join(question.split())  # one line: a newline would read as a step boundary
    return f"Q: {question}\n"


def format_solution(steps: tuple[str, ...] | list[str], answer: str) -> str:
    lines = [*steps, f"{ANSWER_PREFIX}{answer}"]
    return "\n".join(lines) + "\n"


def split_of(question: str) -> str:
    """'test' or 'train', by a stable hash of the normalized question text."""
    digest = hashlib.sha256(" ".join(question.split()).encode()).digest()
    bucket = int.from_bytes(digest[:4], "big") % HASH_BUCKETS
    return "test" if bucket in HELDOUT_BUCKETS else "train"
