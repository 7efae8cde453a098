"""bench/kv_handoff.py runs on the bundled tiny reasoner (its vocab of 100 and context of 512),
as bench/pipeline_overhead.py calls it wherever SmolLM2 is not prepared. It stopped with an
invalid prompt there (found on the first GPU run, 2026-12-04, which lost the pipeline's
figures with it). A figure is checked for being a figure, not for its size."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "kv_handoff.py"


@pytest.mark.slow
def test_kv_handoff_runs_on_the_tiny_reasoner():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--model", "tiny-reasoner", "--threads", "1",
         "--repeats", "1", "--tokens", "64"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "kv_handoff" and summary["tokens"] == 64
    assert summary["handoff_vs_memcpy"] > 0
