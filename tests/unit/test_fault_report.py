"""The fault harness's report of one case (tools/faults.py): lost, duplicated, not ok,
and the worst latency beside a baseline's."""

from __future__ import annotations

from tools.faults import FAULTS, FaultRun, make_jobs


def test_a_case_counts_lost_duplicated_and_not_ok_jobs() -> None:
    run = FaultRun("redis_restart", ["a", "b", "c", "d"])
    run.counts = {"a": 1, "b": 2, "d": 1}  # c: no Result; b: two
    run.statuses = {"a": "ok", "b": "ok", "d": "error:internal"}
    run.latency_s = {"a": 1.0, "b": 4.5, "d": 2.0}
    assert (run.sent, run.results, run.lost, run.duplicated) == (4, 3, ["c"], {"b": 2})
    assert run.not_ok == {"d": "error:internal"}
    baseline = FaultRun("none", ["x"])
    baseline.latency_s = {"x": 3.0}
    row = run.row(baseline)
    assert (row["lost"], row["duplicated"], row["not_ok"]) == (1, 1, 1)
    assert (row["worst_s"], row["extra_s"]) == (4.5, 1.5)
    assert run.row()["extra_s"] is None  # no baseline, no difference


def test_the_matrix_starts_with_its_baseline_and_names_each_fault() -> None:
    assert list(FAULTS) == [
        "none", "redis_restart", "broker_pause", "verify_killed", "verify_replaced", "decode_lost",
    ]  # fmt: skip


def test_case_jobs_skip_the_caches_and_verify_on_the_side() -> None:
    jobs = make_jobs(3, "t")
    assert [j.id for j in jobs] == ["t-0", "t-1", "t-2"]
    assert all(j.params.seed is None and j.params.temperature > 0 for j in jobs)  # no cache key
    assert all(j.params.verify == "async" for j in jobs)
