"""Adapter for `reasoning-gym` (offline PyPI generators with their own scoring).

Task names are `rg:<dataset>`, e.g. `rg:basic_arithmetic`. The question goes into our prompt
format unchanged (whitespace collapsed to one line); the answer is scored by the dataset's own
`score_answer`, a problem counting as solved only at full score.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pipeline.evals.problems import Problem

PREFIX = "rg:"
KNOWN_TASKS = ("gsm_symbolic", "basic_arithmetic", "chain_sum")


class ReasoningGymUnavailable(RuntimeError):
    """reasoning-gym is not installed, or it does not know the dataset."""


def _rg():
    try:
        import reasoning_gym
    except ImportError as exc:  # an optional dependency: say how to get it
        raise ReasoningGymUnavailable(
            "reasoning-gym is not installed; `pip install reasoning-gym` to use rg:* tasks"
        ) from exc
    return reasoning_gym


@lru_cache(maxsize=32)
def _dataset(name: str, n: int, seed: int) -> Any:
    rg = _rg()
    try:
        return rg.create_dataset(name, size=n, seed=seed)
    except (KeyError, ValueError) as exc:
        raise ReasoningGymUnavailable(f"reasoning-gym has no dataset {name!r}: {exc}") from exc


def load(task: str, n: int, seed: int) -> list[Problem]:
    """`n` problems of `rg:<name>`; reasoning-gym's own seed, so the same seed, same problems."""
    name = task.removeprefix(PREFIX)
    ds = _dataset(name, n, seed)
    out = []
    for i in range(n):
        entry = ds[i]
        out.append(
            Problem(
                family=f"{PREFIX}{name}",
                question=str(entry["question"]),
                steps=(),
                answer=str(entry["answer"]),
                seed=seed,
                index=i,
                meta={"rg_dataset": name, "rg_size": n, "rg_index": i},
            )
        )
    return out


def score(problem: Problem, answer: str | None) -> float:
    """reasoning-gym's score for our extracted answer, in [0, 1]."""
    meta = problem.meta
    ds = _dataset(meta["rg_dataset"], meta["rg_size"], problem.seed)
    return float(ds.score_answer(answer=answer, entry=ds[meta["rg_index"]]))


def is_rg_task(task: str) -> bool:
    return task.startswith(PREFIX)
