"""Reasoning task generators, step scoring, the reasoning-gym adapter and the eval runner."""

from pipeline.evals.generators import EVAL_FAMILIES, FAMILIES, Difficulty, generate, make_problem
from pipeline.evals.problems import (
    TRAIN_SEED_BASE,
    Problem,
    format_prompt,
    format_solution,
    split_of,
)
from pipeline.evals.scoring import TraceScore, answers_match, score_trace

__all__ = [
    "EVAL_FAMILIES",
    "FAMILIES",
    "TRAIN_SEED_BASE",
    "Difficulty",
    "Problem",
    "TraceScore",
    "answers_match",
    "format_prompt",
    "format_solution",
    "generate",
    "make_problem",
    "score_trace",
    "split_of",
]
