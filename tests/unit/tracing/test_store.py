"""Spans through a real OpenTelemetry provider into the local store and back: context carried
in Kafka and Celery headers joins one tree; sampling 0 builds nothing."""

from __future__ import annotations

import json

import pytest

from pipeline.tracing import propagate, setup, spans, store, tree


@pytest.fixture
def provider(span_store):
    return span_store


def test_sampling_zero_builds_no_provider_and_writes_no_header(tmp_path) -> None:
    setup.shutdown()
    assert setup.init_tracing("test", 0.0, str(tmp_path)) is None
    span = spans.start_job_span("ingest", "j1")
    assert not span.is_recording()
    assert spans.kafka_headers_of(span) == [] and spans.headers_of(span) == {}
    spans.end(span, outcome="x")
    assert list(tmp_path.iterdir()) == []


def test_a_bad_sample_is_refused(tmp_path) -> None:
    setup.shutdown()
    with pytest.raises(ValueError, match="TRACE_SAMPLE"):
        setup.init_tracing("test", 1.5, str(tmp_path))


def test_context_through_headers_joins_one_tree(provider) -> None:
    ingest = spans.start_job_span("ingest", "j1", tenant="acme")
    kafka = spans.kafka_headers_of(ingest)
    assert [k for k, _ in kafka] == ["traceparent", "tracestate"]
    assert kafka[0][1].startswith(b"00-")
    assert kafka[1][1] == f"stepwise={setup.instance()}".encode()  # the caller names itself
    spans.end(ingest, outcome="admitted")
    prefill = spans.start_job_span("prefill", "j1", kafka)  # as a consumer reads the record
    decode = spans.start_job_span("decode", "j1", spans.kafka_headers_of(prefill))
    celery = spans.headers_of(decode)  # a Celery task's headers: plain strings
    check = spans.start_job_span("verify", "j1", celery)
    spans.end(check, verdict="contradicted")
    decode.add_event("backtrack", {"step": 2})
    spans.end(prefill)
    spans.end(decode, error="engine_error: boom")
    setup.flush()
    got = store.trace_of(store.read_spans(provider), "j1")
    assert [s["name"] for s in got] == ["ingest", "prefill", "decode", "verify"]
    assert len({s["trace_id"] for s in got}) == 1
    by = {s["name"]: s for s in got}
    assert by["ingest"]["parent_id"] is None
    assert by["prefill"]["parent_id"] == by["ingest"]["span_id"]
    assert by["verify"]["parent_id"] == by["decode"]["span_id"]
    assert by["decode"]["status"] == "error" and by["decode"]["error"] == "engine_error: boom"
    assert by["ingest"]["attributes"]["stepwise.tenant"] == "acme"
    assert by["decode"]["events"][0]["name"] == "backtrack"
    # Each span called from another process knows its caller: here every "process" is this one.
    assert by["prefill"]["attributes"]["stepwise.caller"] == setup.instance()
    assert "stepwise.caller" not in by["ingest"]["attributes"]
    roots = tree.build(got)
    assert len(roots) == 1 and roots[0]["children"][0]["name"] == "prefill"
    lines = tree.render(roots)
    assert len(lines) == 5 and "ERROR: engine_error: boom" in lines[2] and "* backtrack" in lines[3]


def test_a_called_span_records_its_edge_as_a_metric(provider) -> None:
    from pipeline import telemetry

    me = setup.instance()
    edge = {"source": "decode@elsewhere:7", "target": me}

    def count(name: str) -> float:
        return telemetry.REGISTRY.get_sample_value(name, edge) or 0.0

    before = count("stepwise_trace_call_seconds_count"), count("stepwise_trace_call_errors_total")
    decode = spans.start_job_span("decode", "j3")
    headers = spans.headers_of(decode)
    # The caller's tracestate entry replaces the one it received (one hop, one caller).
    headers["tracestate"] = "stepwise=decode@elsewhere:7,other=x"
    check = spans.start_job_span("verify", "j3", headers)
    onward = spans.headers_of(check)["tracestate"]
    spans.end(check, error="boom", retries=2)
    spans.end(decode)
    assert count("stepwise_trace_call_seconds_count") == before[0] + 1
    assert count("stepwise_trace_call_errors_total") == before[1] + 1
    assert count("stepwise_trace_call_retries_total") >= 2
    assert "other=x" in onward and onward.startswith(f"stepwise={me}")  # others' travel on


def test_child_spans_stay_in_the_process_and_carry_the_job(provider) -> None:
    decode = spans.start_job_span("decode", "j4")
    step = spans.start_child(decode, "step", index=0)
    spans.end(step)
    with pytest.raises(RuntimeError), spans.child(decode, "cache.lookup", level="step"):
        raise RuntimeError("redis away")
    spans.end(decode)
    setup.flush()
    got = {s["name"]: s for s in store.trace_of(store.read_spans(provider), "j4")}
    assert got["step"]["parent_id"] == got["decode"]["span_id"]
    assert got["step"]["attributes"]["stepwise.index"] == 0
    assert got["cache.lookup"]["status"] == "error" and "redis away" in got["cache.lookup"]["error"]
    assert "stepwise.caller" not in got["step"]["attributes"]  # not a call between instances
    off = spans.start_child(spans.start_job_span("x", "j5", None), "step")
    assert off.is_recording()  # under a recorded parent
    setup.shutdown()
    assert not spans.start_child(spans.start_job_span("x", "j6"), "step").is_recording()


def test_headers_without_a_context_start_a_new_trace(provider) -> None:
    assert propagate.from_headers(None) is not None
    a = spans.start_job_span("ingest", "a", [("content-type", b"application/json")])
    b = spans.start_job_span("ingest", "b", {"traceparent": "not a traceparent"})
    spans.end(a)
    spans.end(b)
    setup.flush()
    got = list(store.read_spans(provider))
    assert len({s["trace_id"] for s in got}) == 2 and all(s["parent_id"] is None for s in got)


def test_a_torn_line_is_skipped(provider) -> None:
    spans.end(spans.start_job_span("ingest", "j2"))
    setup.flush()
    path = next(provider.glob("*.jsonl"))
    with path.open("a") as f:
        f.write('{"trace_id": "x", "span')  # a process killed mid-write
    got = list(store.read_spans(provider))
    assert len(got) == 1 and json.dumps(got[0])
