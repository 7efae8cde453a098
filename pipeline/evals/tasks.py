"""Task names -> problems, and how each is scored.

Our families (`arith`, `linear`, `system`, `word`, `drill`) come from the seeded generators,
held-out split; `indist` is the four problem families in equal parts (the model card's
"in-distribution" set); `broad` the R1-style reasoner's seven (with `product`, `signed`,
`story`: pipeline/evals/curriculum.py); `rg:<name>` comes from reasoning-gym and is scored by it.
"""

from __future__ import annotations

from pipeline.evals import rg_adapter
from pipeline.evals.generators import (
    BROAD_FAMILIES,
    DEFAULT_LEVEL,
    EVAL_FAMILIES,
    FAMILIES,
    generate,
)
from pipeline.evals.problems import Problem
from pipeline.evals.scoring import TraceScore, score_trace

GROUPS = {"indist": EVAL_FAMILIES, "broad": BROAD_FAMILIES}


def known_tasks() -> list[str]:
    return [*FAMILIES, *GROUPS, *(rg_adapter.PREFIX + t for t in rg_adapter.KNOWN_TASKS)]


def parse_tasks(spec: str) -> list[str]:
    """'indist,rg:basic_arithmetic' -> task names; raises ValueError naming the unknown one."""
    names = [t.strip() for t in spec.split(",") if t.strip()]
    if not names:
        raise ValueError("no task given")
    for name in names:
        if name not in FAMILIES and name not in GROUPS and not rg_adapter.is_rg_task(name):
            raise ValueError(f"unknown task {name!r}; known: {', '.join(known_tasks())}")
    return names


def load_problems(task: str, n: int, seed: int, level: str = DEFAULT_LEVEL) -> list[Problem]:
    """`n` problems of one task (for a group: n split evenly over its families)."""
    if task in GROUPS:
        fams = GROUPS[task]
        sizes = [n // len(fams) + (i < n % len(fams)) for i in range(len(fams))]
        return [
            p
            for fam, k in zip(fams, sizes, strict=True)
            for p in generate(fam, k, seed, level=level)
        ]
    if rg_adapter.is_rg_task(task):
        return rg_adapter.load(task, n, seed)
    return generate(task, n, seed, level=level)


def score(problem: Problem, completion: str, fmt=None) -> tuple[TraceScore, float]:
    """Step figures of the completion, and the answer score in [0, 1]; the answer is found by
    the model's reasoning format (`fmt`; default: the tiny reasoner's `Answer:` line)."""
    finder = None if fmt is None or fmt.name == "tiny" else fmt.find_answer
    trace = score_trace(completion, problem.answer, finder)
    if rg_adapter.is_rg_task(problem.family):
        return trace, rg_adapter.score(problem, trace.answer)
    return trace, float(trace.correct)
