"""The one place request parameters become SamplingParams: a Job's JobParams (or CLI flags of the
same names), and a reasoning job's with its verify mode's holds (decode's handoffs and
`stepwise eval`'s problems alike)."""

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


def reasoning_params(params: SamplingParams, verify: str) -> SamplingParams:
    """`params` set up for a verify mode: held finishes, paused step ends in strict mode, and
    discarded tokens paid from the budget."""
    params.pause_on_finish = verify != "off"
    params.pause_on_step_end = verify == "strict"
    params.charge_rollbacks = True
    return params


def job_params(params: schema.JobParams, seed: int, max_tokens: int) -> SamplingParams:
    """What a reasoning job runs with: its knobs, its seed (ingest's for a handoff), the
    engine's token limit, and its verify mode's holds."""
    return reasoning_params(
        sampling_params(params, seed=seed, max_tokens=max_tokens), params.verify
    )


def handoff_params(h: schema.Handoff, max_tokens: int) -> SamplingParams:
    """What decode runs a handoff with (`job_params` with the seed ingest gave it); `suffix`
    speculation reads and keeps earlier outputs of the job's tenant only."""
    params = job_params(h.params, h.seed, max_tokens)
    params.spec_scope = h.tenant
    return params
