"""bench/speculative_pipeline.py, small, on the tiny reasoner: two fresh local stacks (embedded
broker and Redis, worker processes, a Celery verify worker), decode speculating on one; every
job gets its Result on both, and the side with speculation reads its proposals off decode's
/metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_the_pipeline_bench_times_both_sides_and_reads_decodes_counts():
    env = {k: v for k, v in os.environ.items() if k not in ("STEPWISE_KAFKA", "STEPWISE_REDIS")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        sys.executable, str(ROOT / "bench" / "speculative_pipeline.py"), "--model",
        "tiny-reasoner", "--tasks", "indist", "--n", "3", "--rounds", "1", "--concurrency", "2",
        "--max-tokens", "120", "--speculative-config", '{"method": "ngram"}',
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    (row,) = report["rounds"]
    assert row["off"]["ok"] == row["on"]["ok"] == 3
    assert row["off"]["acceptance"] is None  # no proposals without speculation
    assert row["on"]["acceptance"] is not None and 0 <= row["on"]["acceptance"] <= 1
    assert row["off"]["tokens_per_forward"] >= 1  # a token per sequence in each forward
    assert row["p50_ratio"] > 0 and row["tps_ratio"] > 0
    assert "p50 latency off / on" in done.stdout
