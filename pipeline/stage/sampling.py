"""Request parameters (a Job's JobParams, or CLI flags of the same names) -> SamplingParams."""

from __future__ import annotations

from pipeline import schema
from pipeline.engine import SamplingParams


def sampling_params(p: schema.JobParams | object, **overrides: object) -> SamplingParams:
    """Anything with temperature / top_p / top_k / min_p / seed attributes, plus overrides."""
    values = dict(
        temperature=p.temperature,
        top_p=p.top_p,
        top_k=p.top_k,
        min_p=p.min_p,
        seed=p.seed,
    )
    values.update(overrides)
    return SamplingParams(**values)  # type: ignore[arg-type]
