"""bench/slo_load.py's pure parts: the seeded arrival stream and DistServe's goodput (the
highest rate at which >= 90% of jobs finish within the SLO)."""

from __future__ import annotations

import math
import sys

import pytest

from tests.unit.bench.conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    yield load_bench("slo_load")
    sys.modules.pop("slo_load", None)


def test_arrivals_are_seeded_poisson(bench):
    a = bench.arrivals(2.0, 600.0, 7)
    assert a == bench.arrivals(2.0, 600.0, 7)  # the same stream for both modes
    assert a != bench.arrivals(2.0, 600.0, 8)
    assert all(0 < x < 600 for x in a) and a == sorted(a)
    assert abs(len(a) / 600.0 - 2.0) < 0.2  # ~rate arrivals per second
    gaps = [b - x for x, b in zip(a, a[1:], strict=False)]
    assert abs(sum(gaps) / len(gaps) - 0.5) < 0.05  # exponential gaps of mean 1/rate


def test_goodput_is_the_highest_rate_meeting_90_percent(bench):
    table = [
        {"rate": 0.5, "attainment": 1.0},
        {"rate": 1.0, "attainment": 0.92},
        {"rate": 1.5, "attainment": 0.85},
        {"rate": 2.0, "attainment": 0.90},  # met again higher up: the highest one counts
        {"rate": 3.0, "attainment": 0.2},
    ]
    assert bench.goodput(table)["rate"] == 2.0
    assert bench.goodput([{"rate": 1.0, "attainment": 0.5}]) is None


def test_summary_counts_unfinished_jobs_as_late_and_wrong(bench):
    from pipeline import schema
    from pipeline.evals.problems import Problem

    p = Problem(family="t", question="1+1?", answer="2", steps=(), premises=(), seed=0, index=0)
    ok = schema.Result(id="a", status="ok", answer="2", ts_ms=0)
    rows = [(1.0, p, 0.5, ok), (1.0, p, math.inf, None)]
    (row,) = bench.summarize(rows, [1.0], slo_s=1.0, phase_s=10.0)
    assert row["attainment"] == 0.5 and row["accuracy"] == 0.5 and math.isinf(row["p95_s"])
    assert row["within_per_s"] == row["correct_per_s"] == 0.1


def test_refused_jobs_count_as_misses_of_every_job_sent_not_of_the_admitted(bench):
    from pipeline import schema
    from pipeline.evals.problems import Problem

    p = Problem(family="t", question="1+1?", answer="2", steps=(), premises=(), seed=0, index=0)
    ok = schema.Result(id="a", status="ok", answer="2", ts_ms=0)
    wrong = schema.Result(id="b", status="ok", answer="3", ts_ms=0)
    shed = schema.Result(
        id="c",
        status="error",
        ts_ms=0,
        error=schema.ErrorInfo(code="overloaded", message="", retry_after_s=4),
    )
    rows = [(1.0, p, 0.5, ok), (1.0, p, 0.7, wrong), (1.0, p, 0.01, shed), (1.0, p, 0.01, shed)]
    (row,) = bench.summarize(rows, [1.0], slo_s=1.0, phase_s=2.0)
    assert row["shed"] == 2 and row["attainment"] == 0.5 and row["attainment_admitted"] == 1.0
    assert row["accuracy"] == 0.5  # of the admitted jobs
    assert row["within_per_s"] == 1.0 and row["correct_per_s"] == 0.5
