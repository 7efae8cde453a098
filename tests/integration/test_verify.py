"""Verification on the real stack: a Celery worker on Redis checks steps; decode backtracks.

* the task answers on the asker's Redis stream, and a repeated task answers the same;
* a step the checker contradicts produces a `backtrack` event, and no Result keeps one;
* killing the Celery worker mid-job does not stall the job (the verdict timeout path).
"""

from __future__ import annotations

import uuid

import msgspec
import pytest

from pipeline import schema
from pipeline.client import current_chain
from pipeline.config import PipelineConfig
from pipeline.engine import Engine, EngineConfig, SamplingParams
from pipeline.models.resolve import resolve_model
from pipeline.verify.checker import check_step
from pipeline.verify.repair import find_repair
from tests.integration.conftest import VerifyWorker
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config

PROBLEM = "Solve for x: 4x + 42 = 94."  # 94 - 42 is beyond the tiny reasoner: it errs often


def test_the_task_answers_on_the_stream_and_repeats_its_answer(verify_worker):
    bad = verify_worker.check("3 + 4 = 8")
    assert bad.verdict == "contradicted" and "false" in bad.detail and bad.worker
    linear = "Q: Solve for x: 3x + 7 = 22.\n"
    assert verify_worker.check("3x = 22 - 7 = 15", problem=linear).verdict == "entailed"
    assert verify_worker.check("x = 6", problem=linear).verdict == "contradicted"
    again = verify_worker.check("3 + 4 = 8")
    assert (again.verdict, again.detail) == (bad.verdict, bad.detail)  # idempotent


def first_wrong_seed(problem: str, max_tokens: int, repairable: bool = False) -> int:
    """A seed whose unverified run writes a contradicted step (with `repairable`: a wrong value
    verify mode repair replaces). Sampling is position-seeded, so the pipeline's first attempt
    with this seed is the same run."""
    engine = Engine(EngineConfig(model=str(resolve_model("tiny-reasoner")), dtype="float32"))
    ids = engine.encode_prompt([{"role": "user", "content": problem}])
    text = engine.tokenizer.decode(ids)
    for seed in range(64):
        p = SamplingParams(temperature=0.7, seed=seed, max_tokens=max_tokens)
        out = engine.generate([ids], p)[0].text
        steps = [s for s in out.split("\n") if s.strip()]
        for i, step in enumerate(steps):
            if repairable and find_repair(step, final=True) is not None:
                return seed
            if not repairable and check_step(text, (), steps[:i], step).verdict == "contradicted":
                return seed
    raise AssertionError("no seed made a mistake: pick a harder problem")


def config_for(kafka, redis, topics, **kw) -> PipelineConfig:
    return stack_config(kafka, redis, topics, **kw)


async def one_wrong_job(kafka, redis, topics, verify: str):
    """One job on the real stack whose first attempt writes a wrong step (with verify mode
    repair: a value the repairer replaces); its Result and its events."""
    seed = first_wrong_seed(PROBLEM, max_tokens=160, repairable=verify == "repair")
    params = schema.JobParams(temperature=0.7, seed=seed, max_tokens=160, verify=verify)
    job = schema.Job(id=f"{verify}-{uuid.uuid4().hex[:8]}", prompt=PROBLEM, params=params)
    config = config_for(kafka, redis, topics)
    async with running_stack(config):
        events, results = await run_jobs(config, [job], timeout_s=180)
    (result,) = results[job.id]
    return result, events[job.id]


@pytest.mark.slow
@pytest.mark.parametrize("verify", ["async", "strict"])
async def test_a_contradicted_step_is_backtracked_out_of_the_chain(
    kafka_bootstrap, redis_url, topics, verify_worker, verify
):
    result, evs = await one_wrong_job(kafka_bootstrap, redis_url, topics, verify)
    assert [e.seq for e in evs] == list(range(len(evs)))  # gap-free through backtracks
    # Resamples (a forced answer's cut of an unchecked step is a backtrack with no verdict).
    backtracks = [e for e in evs if e.kind == "backtrack" and e.verdict == "contradicted"]
    contradicted = [e for e in evs if e.kind == "verdict" and e.verdict == "contradicted"]
    assert backtracks and contradicted and result.usage.backtracks == len(backtracks)
    assert result.usage.wasted_tokens > 0 and result.status == "ok"
    # Spent: kept and wasted tokens (an answer cue the decoder put in is not generated).
    u = result.usage
    assert u.wasted_tokens < result.budget.used <= u.completion_tokens + u.wasted_tokens
    assert all(s.verdict != "contradicted" for s in result.steps)
    assert current_chain(evs) == [s.text for s in result.steps]
    # budget / unverified (gave up): the answer was forced from the chain that held
    assert result.budget.stop_reason in ("answer", "budget", "unverified")
    if result.budget.stop_reason == "unverified":  # gave up: no answer is claimed
        assert result.answer is None and result.content == ""
    else:
        assert result.answer is not None
    # Every step the Result keeps got a verdict (a forced answer is not checked); `unknown`
    # is one (an unparseable step, or no verdict within the timeout on a loaded machine).
    forced = result.budget.stop_reason in ("budget", "unverified")
    checked = result.steps[:-1] if forced else result.steps
    assert all(s.verdict in ("entailed", "consistent", "no_claim", "unknown") for s in checked)


@pytest.mark.slow
async def test_killing_the_verify_worker_mid_job_does_not_stall_it(
    kafka_bootstrap, redis_url, topics, tmp_path
):
    # A Redis database of its own: the session's verify worker must not answer for the dead one.
    own_db = redis_url.rsplit("/", 1)[0] + "/7"
    worker = VerifyWorker(own_db, tmp_path / "verify.log")
    try:
        assert worker.check("1 + 1 = 2") is not None
        config = config_for(kafka_bootstrap, own_db, topics, verdict_timeout_s=2.0)
        params = schema.JobParams(temperature=0.7, max_tokens=120, verify="strict")
        jobs = [
            schema.Job(id=f"kill-{i}-{uuid.uuid4().hex[:8]}", prompt=f"Compute {i} + 7 * 3.")
            for i in range(6)
        ]
        jobs = [msgspec.structs.replace(j, params=params) for j in jobs]

        def kill_after_first_verdict(msg) -> None:
            if isinstance(msg, schema.Event) and msg.kind == "verdict":
                worker.kill()

        async with running_stack(config):
            events, results = await run_jobs(
                config, jobs, timeout_s=120, on_message=kill_after_first_verdict
            )
    finally:
        worker.stop()
    assert set(results) == {j.id for j in jobs}
    assert all(len(r) == 1 and r[0].status == "ok" for r in results.values())
    timed_out = [
        e for evs in events.values() for e in evs if e.kind == "verdict" and "timeout" in e.detail
    ]
    assert timed_out and all(e.verdict == "unknown" for e in timed_out)
    steps = [s for r in results.values() for s in r[0].steps]
    assert any(s.verdict == "unknown" for s in steps)


@pytest.mark.slow
async def test_a_wrong_value_is_repaired_in_place_and_said_so(
    kafka_bootstrap, redis_url, topics, verify_worker
):
    result, evs = await one_wrong_job(kafka_bootstrap, redis_url, topics, "repair")
    assert [e.seq for e in evs] == list(range(len(evs)))
    said = [e for e in evs if e.kind == "repair"]
    assert said and result.status == "ok" and result.repairs
    assert result.usage.repairs == len(said) >= len(result.repairs)  # later rollbacks drop some
    for r in result.repairs:  # each kept repair's new value stands where the Result says
        assert result.text[r.start : r.end] == r.new != r.old
        assert r.old in r.claim and f"{r.old} -> {r.new}" in " ".join(e.detail for e in said)
    assert current_chain(evs) == [s.text for s in result.steps]
