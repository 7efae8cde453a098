"""A job whose decoding raises ends with an error Result; the jobs beside it are not lost.

The fault is injected into our own reasoning driver for one job id (the broker, Redis and the
stages are real): before the fix, the exception failed the whole decode tick, and Results that
other jobs had finished in that tick were never published."""

from __future__ import annotations

import uuid

import pytest

from pipeline import schema
from pipeline.reasoning.driver import ReasoningDriver
from pipeline.stage.jobstate import JobState
from tests.integration.pipeline_helpers import count_results, run_jobs, running_stack, stack_config

pytestmark = pytest.mark.slow


async def test_one_failing_job_gets_an_error_result_and_the_others_finish(
    kafka_bootstrap, redis_url, topics, monkeypatch
):
    # The fault is patched into this process: the engine core runs on a thread of it.
    config = stack_config(kafka_bootstrap, redis_url, topics, decode_core="thread")
    tag = uuid.uuid4().hex[:6]
    bad = f"boom-{tag}"
    advance = ReasoningDriver.advance

    def failing(self, now_s):
        if self.seq.request_id.startswith(bad) and self.seq.num_output_tokens >= 5:
            raise RuntimeError("injected fault")
        return advance(self, now_s)

    monkeypatch.setattr(ReasoningDriver, "advance", failing)
    params = schema.JobParams(temperature=0.0, verify="off")
    jobs = [schema.Job(id=bad, prompt="Compute 7 * 6.", params=params)] + [
        schema.Job(id=f"ok{i}-{tag}", prompt=f"Compute {i} + {i + 2}.", params=params)
        for i in range(4)
    ]
    async with running_stack(config):
        _, results = await run_jobs(config, jobs, timeout_s=120)
    assert {j.id for j in jobs} == set(results) and all(len(r) == 1 for r in results.values())
    (failed,) = results[bad]
    assert failed.status == "error" and failed.error is not None and failed.answer is None
    for j in jobs[1:]:
        (r,) = results[j.id]
        assert r.status == "ok" and r.answer, r


async def test_a_decode_worker_that_cannot_load_its_model_says_why(
    kafka_bootstrap, redis_url, topics, tmp_path
):
    from pipeline.decode.worker import DecodeWorker

    config = stack_config(kafka_bootstrap, redis_url, topics, model=str(tmp_path / "no-model"))
    # Its teardown once raised AttributeError ('sender') over the real error.
    with pytest.raises(Exception) as failed:
        await DecodeWorker(config).run()
    assert not isinstance(failed.value, AttributeError)
    assert "no-model" in str(failed.value), failed.value


async def test_a_retried_delivery_does_not_publish_its_results_twice(
    kafka_bootstrap, redis_url, topics, monkeypatch
):
    """Redis fails decode's done-marking once, after a tick's Results went out: the retry
    marks them again and acks, and publishes nothing twice (before, it re-sent the tick)."""
    config = stack_config(kafka_bootstrap, redis_url, topics)
    mark_done, failed = JobState.mark_done, []

    async def failing_once(self, job_id, worker):
        if worker.startswith("decode") and not failed:
            failed.append(job_id)
            raise ConnectionError("injected: Redis went away")
        return await mark_done(self, job_id, worker)

    monkeypatch.setattr(JobState, "mark_done", failing_once)
    tag = uuid.uuid4().hex[:6]
    params = schema.JobParams(temperature=0.7, verify="off")
    jobs = [
        schema.Job(id=f"retry{i}-{tag}", prompt=f"Compute {i} + {i + 3}.", params=params)
        for i in range(4)
    ]
    async with running_stack(config):
        _, results = await run_jobs(config, jobs, timeout_s=120)
        counts = await count_results(kafka_bootstrap, topics.prefix)
    assert failed, "the fault never fired"
    assert {j.id for j in jobs} == set(results)
    assert all(r.status == "ok" for rs in results.values() for r in rs)
    assert {j.id: counts.get(j.id) for j in jobs} == {j.id: 1 for j in jobs}, counts
