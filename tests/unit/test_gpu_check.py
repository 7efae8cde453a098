"""scripts/gpu_check.sh, the prepared GPU run: its dry run on CPU (syntax, every test selection
collects tests, every bench flag exists, the step limits fit the 8 minutes)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
STEPS = ("parity", "gpu_tests", "kernels", "engine", "pipeline")


def test_the_dry_run_checks_every_step():
    env = {**os.environ, "PYTHON": sys.executable}
    out = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for name in STEPS:
        assert f"dry-run: {name}:" in out.stdout, out.stdout
    assert "tests collected" in out.stdout and "flags ok" in out.stdout


def test_the_steps_fit_eight_minutes():
    out = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True, text=True)
    limits = dict(line.split()[:2] for line in out.stdout.splitlines())
    assert tuple(limits) == STEPS
    assert sum(int(v) for v in limits.values()) <= 480
