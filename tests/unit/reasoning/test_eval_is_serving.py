"""What `stepwise eval` measures is what decode serves: the same job (its JobParams, its seed,
the limits ingest stamps when no controller runs) gives the same tokens, steps and verdicts
through `generate_verified` as through decode's core (DecodeCore ticked as its process ticks
it, the KV prefilled again as after a handoff without KV, verdicts from the same local checker
fed back as the verify workers' messages)."""

from __future__ import annotations

import pytest

from pipeline import schema
from pipeline.config import PipelineConfig, SpeculativeConfig
from pipeline.decode.core import DecodeCore
from pipeline.decode.messages import Inward
from pipeline.engine import Engine, EngineConfig
from pipeline.evals.verified import default_budget, generate_verified
from pipeline.models.resolve import resolve_model
from pipeline.verify.local import LocalVerifier

PROBLEMS = ["Q: 17 + 25 - 8 = ?", "Q: 6 * 7 + 3 = ?", "Q: (40 - 4) / 3 = ?"]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(EngineConfig(model=str(resolve_model("tiny-reasoner")), dtype="float32"))


@pytest.fixture(scope="module")
def verifier():
    v = LocalVerifier()
    yield v
    v.close()


def served(
    engine: Engine, problem: str, params: schema.JobParams, verifier, stats: list | None = None
) -> schema.Result:
    """One job through decode's core, as a handoff whose KV did not come (prefilled again).
    Redis is a port nobody answers: the step cache misses, as for a job that is not cached."""
    config = PipelineConfig(redis="redis://127.0.0.1:9/0")
    core = DecodeCore(engine, config, "stepwise.verdicts:test")
    ids = engine.encode_prompt(problem)
    h = schema.Handoff(
        id="job-1", model="tiny-reasoner", token_ids=ids, problem=problem, params=params,
        budget=default_budget(config), admitted_ms=1, first_token=0, first_logprob=0.0,
        prefill_worker="p", prefill_ms=0, seed=params.seed or 0,
    )  # fmt: skip
    core.take(Inward(handoffs=[h]))
    try:
        for _ in range(5000):
            tick = core.tick()
            if stats is not None:
                stats.append(tick.stats)
            verdicts = []
            for req in tick.checks:  # what a verify worker would answer, in order
                verdict, detail, claims = verifier.submit(
                    req.problem, req.premises, req.accepted, req.text
                ).result(timeout=30)
                verdicts.append(
                    schema.VerdictMessage(
                        id=req.id,
                        key=req.key,
                        step=req.step,
                        verdict=verdict,
                        detail=detail,
                        claims=schema.claim_infos(claims),
                    )  # fmt: skip
                )
            core.take(Inward(verdicts=verdicts))
            if tick.results:
                (result,) = tick.results
                return result
    finally:
        core.close()
    raise AssertionError("the job never finished")


@pytest.mark.parametrize("verify", ["off", "strict"])
@pytest.mark.parametrize("seed", [3, 11])
def test_eval_and_decode_give_the_same_tokens(engine, verifier, verify, seed):
    backtracks = 0
    for problem in PROBLEMS:
        params = schema.JobParams(temperature=0.8, max_tokens=160, seed=seed, verify=verify)
        (evald,) = generate_verified(
            engine, [problem], [()], [params], verifier if verify != "off" else None,
            questions=[problem],
        )  # fmt: skip
        result = served(engine, problem, params, verifier)
        assert result.status == "ok", result.error
        assert result.text == evald.text, problem
        assert [s.verdict or "unknown" for s in result.steps] == list(evald.verdicts)
        assert (result.usage.backtracks, result.budget.stop_reason) == (
            evald.backtracks, evald.stop_reason,
        )  # fmt: skip
        backtracks += result.usage.backtracks
    # Strict runs roll back (these problems make the tiny reasoner slip): the verdicts' path,
    # rollbacks and resamples included, is compared too.
    assert (backtracks > 0) == (verify == "strict")


def test_decode_reports_speculation_tick_by_tick(engine, verifier):
    # The same job served with ngram speculation: the same tokens (verified tokens are handed
    # out one per step, so the reasoning sees what it sees without it), and each tick's counts
    # add up to the engine's, as the worker's Prometheus counters take them.
    spec = Engine(
        EngineConfig(
            model=str(resolve_model("tiny-reasoner")), dtype="float32",
            speculative=SpeculativeConfig(method="ngram", num_speculative_tokens=4),
        )
    )  # fmt: skip
    params = schema.JobParams(temperature=0.0, max_tokens=160, seed=5, verify="strict")
    problem = PROBLEMS[0]
    plain = served(engine, problem, params, verifier)
    ticks: list = []
    before = spec.stats.num_spec_proposed
    fast = served(spec, problem, params, verifier, stats=ticks)
    assert fast.status == plain.status == "ok"
    assert fast.text == plain.text
    st = spec.stats
    assert sum(t.spec_draft_tokens for t in ticks) == st.num_spec_proposed - before > 0
    assert sum(t.spec_accepted_tokens for t in ticks) <= sum(t.spec_draft_tokens for t in ticks)
    assert sum(t.spec_drafts for t in ticks) > 0
    forwards, generated = sum(t.forwards for t in ticks), sum(t.generated_tokens for t in ticks)
    assert forwards < generated  # some passes handed out more than one token
