"""StepwiseClient against the real broker: what `follow` yields, with and without events."""

from __future__ import annotations

import time

from pipeline import schema
from pipeline.client import StepwiseClient
from pipeline.topics import Topics


async def publish(client: StepwiseClient, job_id: str) -> None:
    """One job's life as decode publishes it: an event, the ok Result, then its final event
    (a Result may overtake its job's last events: they travel on different topics)."""
    p, t = client.producer, int(time.time() * 1000)
    step = schema.Event(id=job_id, seq=0, kind="step", step=0, text="2 + 2 = 4", ts_ms=t)
    result = schema.Result(id=job_id, status="ok", answer="4", ts_ms=t)
    final = schema.Event(id=job_id, seq=1, kind="final", text="4", ts_ms=t)
    await p.send(client.topics.events, schema.encode(step), key=job_id)
    await p.send(client.topics.results, schema.encode(result), key=job_id)
    await p.send(client.topics.events, schema.encode(final), key=job_id)


async def test_follow_yields_events_and_results_or_results_only(
    kafka_bootstrap: str, topics: Topics
) -> None:
    async with (
        StepwiseClient(kafka_bootstrap, topics.prefix) as everything,
        StepwiseClient(kafka_bootstrap, topics.prefix, events=False) as results_only,
    ):
        await publish(everything, "other-job")  # not followed: never yielded
        await publish(everything, "job-1")
        got = [m async for m in everything.follow({"job-1"}, timeout_s=30)]
        # Both events and the Result (topics interleave in any order): reading went on past
        # the Result until the job's final event was in.
        kinds = sorted(getattr(m, "kind", "result") for m in got)
        assert kinds == ["final", "result", "step"] and {m.id for m in got} == {"job-1"}

        # No final event to wait for: it ends at the Result (waiting out a grace period longer
        # than the timeout would raise TimeoutError).
        only = [m async for m in results_only.follow({"job-1"}, timeout_s=30, grace_s=60)]
        assert [(type(m).__name__, m.id, m.answer) for m in only] == [("Result", "job-1", "4")]
