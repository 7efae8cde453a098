"""bench/pipeline_overhead.py: the engine and gc totals read back from the workers' logs (pure)."""

from __future__ import annotations

from tests.unit.bench.conftest import load_bench as _load


def load_bench():
    return _load("pipeline_overhead")


def test_worker_engine_totals_are_read_from_the_stage_logs(tmp_path):
    bench = load_bench()
    stats = {"num_steps": 306, "step_s": 15.9, "forward_s": 15.7, "num_prefill_tokens": 0,
             "num_decode_tokens": 13123, "num_generated_tokens": 13123}  # fmt: skip
    (tmp_path / "decode.log").write_text(
        "2026-12-01 05:12:50,000 pipeline.stage.worker INFO decode-vm-1 ready: handoff -> decode\n"
        f"2026-12-01 05:12:57,171 pipeline.stage.worker INFO decode-vm-1 engine: {stats}\n"
    )
    gc = {f"gen{g}_{k}": v for g in range(3) for k, v in (("count", 2 - g), ("s", 0.001))}
    (tmp_path / "ingest.log").write_text(
        f"2026-12-01 05:12:57,200 pipeline.stage.worker INFO ingest-vm-1 gc: {gc}\n"
    )
    got = bench.worker_stats(str(tmp_path))
    assert got == {"decode": stats}  # ingest runs no engine
    assert bench.worker_stats(str(tmp_path), "gc") == {"ingest": gc}
    line = bench.engine_line("decode", got["decode"])
    assert "306 steps" in line and "51.3 ms/step" in line and "42.9 decode tokens/step" in line
