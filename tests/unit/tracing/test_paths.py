"""The anomaly-path graph: the weight formula, edges from spans, the heaviest path (pure logic
over span records as the store keeps them)."""

from __future__ import annotations

import math

import pytest

from pipeline.tracing.paths import build_graph, edge_weight, heaviest_paths, p99, to_svg

_ids = iter(range(1, 10_000))


def span(service, pid, parent=None, ms=1.0, error=False, start=0, retries=0) -> dict:
    sid = f"{next(_ids):016x}"
    return {
        "trace_id": "t" * 32, "span_id": sid, "parent_id": parent["span_id"] if parent else None,
        "name": service, "service": f"stepwise-{service}", "host": "h", "pid": pid,
        "start_ns": start, "end_ns": start + int(ms * 1e6), "status": "error" if error else "ok",
        "error": "boom" if error else "", "attributes": {"stepwise.retries": retries},
        "events": [],
    }  # fmt: skip


def test_weight_is_failure_rate_times_log_latency() -> None:
    assert edge_weight(1.0, 500.0) == 0.0  # nothing failed: weight 0 whatever the latency
    assert edge_weight(0.0, 0.0) == 0.0  # log(1) = 0
    assert edge_weight(0.5, 99.0) == pytest.approx(0.5 * math.log(100.0))
    assert edge_weight(0.75, math.e - 1) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        edge_weight(1.5, 1.0)
    with pytest.raises(ValueError):
        edge_weight(0.5, -1.0)


def test_p99_is_nearest_rank() -> None:
    assert p99([5.0]) == 5.0
    assert p99(list(range(1, 101))) == 99
    assert p99(list(range(1, 201))) == 198


def job(verify_ms=5.0, verify_pid=40, error=False, start=0) -> list[dict]:
    ingest = span("ingest", 10, start=start)
    prefill = span("prefill", 20, ingest, ms=30, start=start)
    decode = span("decode", 30, prefill, ms=200, start=start)
    check = span("verify", verify_pid, decode, ms=verify_ms, error=error, start=start)
    inner = span("decode", 30, decode, ms=1, start=start)  # same process: not a call
    return [ingest, prefill, decode, check, inner]


def test_edges_are_calls_between_instances_with_their_figures() -> None:
    spans = job() + job(verify_ms=7.0, error=True)
    edges = build_graph(spans)
    assert set(edges) == {("ingest@h:10", "prefill@h:20"), ("prefill@h:20", "decode@h:30"),
                          ("decode@h:30", "verify@h:40")}  # fmt: skip
    check = edges[("decode@h:30", "verify@h:40")]
    assert check.count == 2 and check.error_rate == 0.5 and check.p99_ms == pytest.approx(7.0)
    assert check.weight == pytest.approx(0.5 * math.log(8.0))
    assert edges[("ingest@h:10", "prefill@h:20")].weight == 0.0


def test_the_window_keeps_only_spans_that_started_in_it() -> None:
    old, new = job(start=0), job(start=10_000)
    assert build_graph(old + new, since_ns=5_000)[("prefill@h:20", "decode@h:30")].count == 1


def test_a_failing_worker_is_on_the_heaviest_path() -> None:
    spans = []
    for _ in range(10):
        spans += job(verify_pid=40)  # a healthy verify worker
        spans += job(verify_pid=41, verify_ms=50.0, error=True)  # a failing one
    best, weight, _ = heaviest_paths(build_graph(spans))[0]
    assert best == ["ingest@h:10", "prefill@h:20", "decode@h:30", "verify@h:41"]
    assert weight == pytest.approx(math.log(51.0))


def test_with_no_failures_the_slow_worker_wins_the_tie() -> None:
    spans = []
    for _ in range(10):
        spans += job(verify_pid=40, verify_ms=2.0) + job(verify_pid=41, verify_ms=400.0)
    paths = heaviest_paths(build_graph(spans), k=2)
    assert paths[0][0][-1] == "verify@h:41" and paths[0][1] == 0.0
    assert paths[1][0][-1] == "verify@h:40"


def test_svg_marks_the_heaviest_path() -> None:
    edges = build_graph(job(error=True))
    best = heaviest_paths(edges)[0][0]
    svg = to_svg(edges, best)
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count('stroke="#d62728"') == 3  # the three calls of the path
    assert "verify@h:40" in svg and "err=100%" in svg
