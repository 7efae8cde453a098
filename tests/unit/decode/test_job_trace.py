"""A traced job's decode spans from the core's TraceMarks (docs/tracing.md): the KV import (and
its fallback), a span per step from boundary to boundary, a backtrack resetting the boundary,
verdicts and forced answers as events, checks joining their step's span; and the marks the core
makes from its outputs (pure logic, a real OpenTelemetry provider into the local store)."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec
import pytest

from pipeline import schema
from pipeline.decode.core import trace_marks
from pipeline.decode.job_trace import JobTrace
from pipeline.decode.kv_intake import KVOutcome, kv_mark
from pipeline.decode.messages import Inward, TraceMark
from pipeline.reasoning.machine import Check, Note
from pipeline.tracing import propagate, setup, spans, store
from tests.unit import test_schema as schema_samples

MS = 1_000_000


@pytest.fixture
def folder(span_store):
    return span_store


def stored(folder, job_id: str) -> list[dict]:
    setup.flush()
    return store.trace_of(store.read_spans(folder), job_id)


def test_steps_backtracks_and_checks_make_one_tree(folder):
    decode = spans.start_job_span("decode", "j1", start_ns=1_000 * MS)
    trace = JobTrace(decode)
    t = 1_000 * MS
    kv = {"transport": "shm_pool", "bytes": 4096}
    trace.apply(TraceMark("j1", "kv_import", t + 5 * MS, -1, t + 1 * MS, kv))
    trace.apply(TraceMark("j1", "step", t + 20 * MS, 0, 0, {"chars": 12}))
    trace.apply(TraceMark("j1", "step", t + 30 * MS, 1, 0))
    # Step 1's check joins step 1's span, though that span has ended.
    check_headers = spans.headers_of(trace.parent_of_check(1))
    trace.apply(TraceMark("j1", "verdict", t + 35 * MS, 1, 0, {"verdict": "contradicted"}))
    trace.apply(TraceMark("j1", "backtrack", t + 36 * MS, 1, 0, {"detail": "3 + 4 = 8"}))
    trace.apply(TraceMark("j1", "step", t + 50 * MS, 1, 0))  # step 1, resampled
    trace.apply(TraceMark("j1", "forced_answer", t + 51 * MS, -1, 0, {"reason": "budget"}))
    check = spans.start_job_span("verify", "j1", check_headers, root=False)
    spans.end(check, verdict="contradicted")
    result = msgspec.structs.replace(
        schema_samples.result(), id="j1", steps=[schema.StepRecord(text=s) for s in "abc"]
    )
    trace.finish(result)  # step 2 had no mark (flushed at the end): it gets its span now
    got = stored(folder, "j1")
    by_id = {s["span_id"]: s for s in got}
    decode_span = next(s for s in got if s["name"] == "decode")
    kv = next(s for s in got if s["name"] == "kv_import")
    assert kv["parent_id"] == decode_span["span_id"] and kv["status"] != "error"
    assert (kv["start_ns"], kv["end_ns"]) == (t + 1 * MS, t + 5 * MS)
    assert kv["attributes"]["stepwise.bytes"] == 4096
    steps = sorted((s for s in got if s["name"] == "step"), key=lambda s: s["start_ns"])
    assert [s["attributes"]["stepwise.index"] for s in steps] == [0, 1, 1, 2]
    assert all(s["parent_id"] == decode_span["span_id"] for s in steps)
    # Boundary to boundary: after the import, after each step, after the backtrack.
    assert [(s["start_ns"] - t) // MS for s in steps[:3]] == [5, 20, 36]
    assert [(s["end_ns"] - t) // MS for s in steps[:3]] == [20, 30, 50]
    assert steps[0]["attributes"]["stepwise.job_id"] == "j1"
    events = [e["name"] for e in decode_span["events"]]
    assert events == ["verdict", "backtrack", "forced_answer"]
    assert decode_span["events"][1]["attributes"] == {"detail": "3 + 4 = 8", "step": 1}
    verify = next(s for s in got if s["name"] == "verify")
    assert by_id[verify["parent_id"]] is steps[1]  # the first attempt of step 1
    assert decode_span["attributes"]["stepwise.steps"] == result.usage.steps


def test_a_cut_starts_the_next_step_like_a_backtrack(folder):
    # A forced answer cut the unfinished step 1: the answer line's span starts at the cut.
    t = 1_000 * MS
    trace = JobTrace(spans.start_job_span("decode", "j3", start_ns=t))
    trace.apply(TraceMark("j3", "step", t + 20 * MS, 0, 0))
    trace.apply(TraceMark("j3", "cut", t + 27 * MS, 1, 0, {"detail": "budget spent"}))
    trace.apply(TraceMark("j3", "step", t + 40 * MS, 1, 0))
    result = msgspec.structs.replace(
        schema_samples.result(), id="j3", steps=[schema.StepRecord(text=s) for s in "ab"]
    )
    trace.finish(result)
    steps = sorted(
        (s for s in stored(folder, "j3") if s["name"] == "step"), key=lambda s: s["start_ns"]
    )
    assert [((s["start_ns"] - t) // MS, (s["end_ns"] - t) // MS) for s in steps] == [
        (0, 20),
        (27, 40),
    ]


def test_a_failed_import_is_an_error_span_and_the_job_goes_on(folder):
    trace = JobTrace(spans.start_job_span("decode", "j2"))
    h = schema_samples.handoff()
    failed = KVOutcome("mooncake", "reprefill", 2000.0, 0, "transfer_timeout: gone")
    mark = kv_mark(msgspec.structs.replace(h, id="j2"), failed)
    assert mark.ts_ns - mark.start_ns == 2000 * 1_000_000  # from when its read began
    assert mark.attrs["fallback"] == "reprefill" and mark.attrs["bytes"] == 0
    assert mark.attrs["transport"] == "mooncake"
    trace.apply(mark)
    trace.finish(msgspec.structs.replace(schema_samples.result(), id="j2"))
    got = {s["name"]: s for s in stored(folder, "j2")}
    assert got["kv_import"]["status"] == "error" and "gone" in got["kv_import"]["error"]
    assert got["decode"]["status"] != "error"  # prefilled again: the job itself is fine


def test_an_untraced_job_checks_without_headers_and_verify_does_not_start_a_trace(folder):
    assert spans.headers_of(spans.start_job_span("decode", "j3", root=False)) == {}
    orphan = spans.start_job_span("verify", "j3", {}, root=False)
    assert not orphan.is_recording()


def test_the_core_marks_notes_and_what_its_driver_did():
    driver = SimpleNamespace(marks=[("forced_answer", {"reason": "budget", "at": 40})])
    run = SimpleNamespace(handoff=SimpleNamespace(id="j4"), driver=driver)
    outs = [
        Note("step", 0, "3 + 4 = 7"),
        Check("0.1", 0, "3 + 4 = 7", ()),
        Note("verdict", 0, "3 + 4 = 7", "entailed", ""),
        Note("backtrack", 1, "x", "contradicted", "false: 8 != 7"),
        # A forced answer's cut: text dropped with no contradiction, not a resample.
        Note("backtrack", 1, "7 * 2", None, "budget spent: the unfinished step is cut"),
    ]
    marks = trace_marks(run, outs)  # type: ignore[arg-type]
    assert [(m.kind, m.step) for m in marks] == [
        ("step", 0), ("verdict", 0), ("backtrack", 1), ("cut", 1), ("forced_answer", -1)
    ]  # fmt: skip
    assert marks[0].attrs == {"chars": 9} and marks[1].attrs == {"verdict": "entailed"}
    assert marks[2].attrs["detail"] == "false: 8 != 7" and driver.marks == []
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(marks[4]), type=TraceMark) == marks[4]


def test_inward_messages_merge_their_traced_jobs():
    a = Inward(traced=["a"])
    a.merge(Inward(traced=["b"]))
    assert a.traced == ["a", "b"]
    assert propagate.caller_of(propagate.from_headers(None)) == ""
