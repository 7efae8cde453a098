"""Decode's I/O side with a handoff delivered twice (stand-ins for Redis and the engine core):
a copy of a job already running here takes over the job's ack, so the offset is committed only
when the job ends; a copy of a finished job is acked and dropped."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import msgspec

from pipeline import schema
from pipeline.decode.worker import DecodeWorker
from tests.unit import test_schema as schema_samples


class Done:
    def __init__(self, done: set[str]) -> None:
        self.done = done

    async def is_done(self, job_id: str) -> bool:
        return job_id in self.done


def worker(done: set[str]) -> DecodeWorker:
    w = DecodeWorker.__new__(DecodeWorker)  # no broker, no Redis, no engine: handle() only
    w.jobs, w.traces, w.state = {}, {}, Done(done)
    w.core = SimpleNamespace(sent=[], submit=lambda msg: w.core.sent.append(msg))
    return w


def record(job_id: str) -> SimpleNamespace:
    h = msgspec.structs.replace(schema_samples.handoff(), id=job_id)
    return SimpleNamespace(value=schema.encode(h), headers=[])


def test_a_copy_of_a_running_job_takes_over_its_ack():
    w, acked = worker(set()), []
    asyncio.run(w.handle(record("j1"), lambda: acked.append("first")))
    assert len(w.core.sent) == 1 and acked == []
    asyncio.run(w.handle(record("j1"), lambda: acked.append("second")))
    # The first copy's offset is released now; the job's end will ack the second copy.
    assert acked == ["first"] and len(w.core.sent) == 1
    w.jobs["j1"][1]()
    assert acked == ["first", "second"]


def test_a_copy_of_a_finished_job_is_acked_and_dropped():
    w, acked = worker({"j2"}), []
    asyncio.run(w.handle(record("j2"), lambda: acked.append("copy")))
    assert acked == ["copy"] and w.core.sent == [] and w.jobs == {}
