"""The C kernels' AArch64 NEON paths (a wheel's users on Graviton, Ampere, Apple silicon under
Linux), checked on this host: each kernel is built with the aarch64 cross compiler twice, with
its NEON path and with -DSTEPWISE_PORTABLE (the portable loops, which the x86 tests compare
with the torch references), into a harness (csrc_checks/neon_harness.c) that prints every
output of fixed pseudo-random cases; both run under qemu-aarch64 and must agree. On an AArch64
host the native compiler builds them and they run directly. Speed is not measured here: an
emulator's timings say nothing about a real core.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.kernels.cpu_build import CSRC

HARNESS = Path(__file__).with_name("csrc_checks") / "neon_harness.c"
NATIVE = platform.machine() in ("aarch64", "arm64")
CC = shutil.which("gcc" if NATIVE else "aarch64-linux-gnu-gcc")
RUNNER = [] if NATIVE else [shutil.which("qemu-aarch64") or ""]
FLAGS = ["-O3", "-march=armv8-a", "-ffast-math", "-fno-strict-aliasing", "-static", "-w"]

pytestmark = pytest.mark.skipif(
    CC is None or (not NATIVE and not RUNNER[0]),
    reason="no aarch64 compiler and emulator here (apt: gcc-aarch64-linux-gnu qemu-user)",
)


def run(tmp_path: Path, check: str, portable: bool) -> list[str]:
    exe = tmp_path / f"{check}{'-portable' if portable else ''}"
    defines = [f"-DCHECK_{check.upper()}"] + (["-DSTEPWISE_PORTABLE"] if portable else [])
    cmd = [CC, *FLAGS, *defines, f"-I{CSRC}", str(HARNESS), "-o", str(exe), "-lm"]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([*RUNNER, str(exe)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.split("\n")


def close(a: list[str], b: list[str], rtol: float, atol: float) -> None:
    assert len(a) == len(b) and len(a) > 50
    bad = [
        (i, x, y)
        for i, (x, y) in enumerate(zip(a, b, strict=True))
        if x != y and abs(float(x) - float(y)) > atol + rtol * abs(float(y))
    ]
    assert not bad, bad[:10]


def test_linear_bf16_neon_matches_portable(tmp_path):
    neon, portable = run(tmp_path, "linear", False), run(tmp_path, "linear", True)
    assert neon[0] == "simd 2" and portable[0] == "simd 0"  # each took the path it names
    close(neon[1:], portable[1:], rtol=1.6e-2, atol=1.6e-2)  # bf16 outputs: an ulp or so


def test_logits_stats_neon_matches_portable(tmp_path):
    neon, portable = run(tmp_path, "logits", False), run(tmp_path, "logits", True)
    argmax = slice(0, None, 4)
    assert neon[argmax] == portable[argmax]  # the first index of the max, ties included
    close(neon, portable, rtol=1e-5, atol=1e-6)


def segments(lines: list[str]) -> list[list[str]]:
    """The outputs after each `rc` line: one case each, fp32 and bf16 in turn."""
    out: list[list[str]] = []
    for line in lines:
        if line.startswith("rc"):
            assert line == "rc 0"
            out.append([])
        elif line and out:
            out[-1].append(line)
    return out


def test_paged_attention_neon_matches_portable(tmp_path):
    neon, portable = run(tmp_path, "attention", False), run(tmp_path, "attention", True)
    assert neon[0] == "lanes 4" and portable[0] == "lanes 1"
    cases = list(zip(segments(neon), segments(portable), strict=True))
    assert len(cases) == 8  # head dims 32, 64, 128 (vector path) and 24 (portable), x 2 dtypes
    for i, (a, b) in enumerate(cases):
        if i % 2 == 0:
            close(a, b, rtol=1e-5, atol=2e-6)  # fp32: float rounding
        else:
            close(a, b, rtol=1.6e-2, atol=1e-3)  # bf16 outputs: an ulp or so
