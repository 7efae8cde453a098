"""Speculative decoding in the decode worker, on a real broker and Redis: with decode's
`speculative_config` set (as `STEPWISE_SPECULATIVE_CONFIG` sets it), jobs come out with the very
texts they have without it, and decode's Prometheus metrics count what was proposed and kept.

Sampled and seeded, verification off: nothing but the engine decides a job's text, so a
speculating engine must give the same tokens (pipeline/engine/speculative.py)."""

from __future__ import annotations

import uuid

import pytest

from pipeline import schema
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config
from tests.integration.test_stack import scrape, series_total

pytestmark = pytest.mark.slow

PROBLEMS = [f"What is {a} + {b} + {c}?" for a, b, c in ((3, 4, 5), (12, 7, 12), (25, 17, 25))]
METHODS = ("", '{"method": "ngram", "num_speculative_tokens": 3}', '{"method": "suffix"}')


def spec_counts(port: int) -> tuple[float, float]:
    """Decode's tokens proposed and accepted so far, from its /metrics."""
    text = scrape(f"http://127.0.0.1:{port}/metrics")
    return (
        series_total(text, "stepwise_spec_decode_num_draft_tokens_total"),
        series_total(text, "stepwise_spec_decode_num_accepted_tokens_total"),
    )


async def test_speculating_decode_gives_the_same_texts_and_counts_its_proposals(
    kafka_bootstrap, redis_url, topics, verify_worker
):
    texts: dict[str, list[str]] = {}
    for spec in METHODS:
        config = stack_config(kafka_bootstrap, redis_url, topics, speculative_config=spec)
        async with running_stack(config) as (_, _, decode):
            # A tenant per run: the same job again would be served from the answer cache.
            tenant = f"spec-{uuid.uuid4().hex[:8]}"
            params = schema.JobParams(temperature=0.7, seed=11, max_tokens=120, verify="off")
            jobs = [
                schema.Job(id=f"spec-{uuid.uuid4().hex[:8]}", tenant=tenant, prompt=p,
                           params=params)
                for p in PROBLEMS
            ]  # fmt: skip
            before = spec_counts(decode.metrics_port)
            _, results = await run_jobs(config, jobs)
            assert [results[j.id][0].status for j in jobs] == ["ok"] * len(jobs)
            texts[spec] = [results[j.id][0].text for j in jobs]
            after = spec_counts(decode.metrics_port)
        proposed, accepted = (a - b for a, b in zip(after, before, strict=True))
        if spec:
            assert proposed > 0, spec  # the decode worker speculated
            assert 0 <= accepted <= proposed
        else:
            assert proposed == 0
    assert all(t for t in texts[""])
    for spec in METHODS[1:]:
        assert texts[spec] == texts[""], spec
