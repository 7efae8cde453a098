"""bench/cpu_kernels.py: the builds a CPU can run, and the table's medians and ratios (the
timing children are run by the bench itself; here its pure parts on made-up times)."""

import pytest

from tests.unit.bench.conftest import load_bench


def test_builds_follow_the_cpu_flags(monkeypatch):
    bench = load_bench("cpu_kernels")
    monkeypatch.setattr(bench, "cpu_flags", lambda: {"avx2", "fma", "sse4_2"})
    assert bench.builds_here() == ["avx2", "avx2-loops", "portable"]
    monkeypatch.setattr(bench, "cpu_flags", lambda: set())  # an ARM host: no x86 flag
    assert bench.builds_here() == ["portable"]


def test_summary_medians_spreads_and_ratios_over_the_baseline():
    bench = load_bench("cpu_kernels")
    runs = [
        {"avx2": {"k": t2}, "avx2-loops": {"k": t1}, "portable": {"k": 9.0, "k torch": tt}}
        for t2, t1, tt in [(1.0, 3.0, 10.0), (2.0, 4.0, 12.0), (1.5, 3.0, 11.0)]
    ]
    table = bench.summarize(runs, ["avx2", "avx2-loops", "portable"], "avx2-loops")
    row = table["k"]
    assert (row["avx2"]["ms"], row["avx2"]["min"], row["avx2"]["max"]) == (1.5, 1.0, 2.0)
    assert row["avx2"]["x_loops"] == pytest.approx(3.0 / 1.5)
    assert row["avx2-loops"]["x_loops"] == 1.0
    assert row["avx2"]["x_torch"] == pytest.approx(11.0 / 1.5)
    assert set(table) == {"k"}  # the torch timings are columns, not cases
