"""Loading the C kernels leaves the process's floating-point state alone.

They are compiled with -ffast-math; linked with it too, gcc adds crtfastmath.o, whose
constructor turns on flush-to-zero and denormals-are-zero in the loading thread. Every float
in the process then loses its subnormals: msgspec's `gt=0.0` check let 0.0 through and
hypothesis refused to draw floats. Checked in a fresh interpreter, so nothing loaded before
(by this test process) can hide or cause it.
"""

import os
import subprocess
import sys

import pytest

from pipeline.kernels import cpu_build

PROBE = """
import sys
import torch  # noqa: F401  (first, as in the engine: its libgomp)
from pipeline.kernels import cpu_build, elementwise_cpu, kv_copy_cpu, logits_stats_cpu
from pipeline.kernels import paged_attention_cpu, sample_cpu
tiny = sys.float_info.min / 2  # a subnormal
assert tiny > 0.0, "subnormals flushed before loading"
for mod in (elementwise_cpu, kv_copy_cpu, logits_stats_cpu, paged_attention_cpu, sample_cpu):
    assert cpu_build.load(mod.LIBRARY) is not None, mod.LIBRARY
assert tiny > 0.0 and tiny * 0.5 > 0.0, "a kernel library turned on flush-to-zero"
print("ok")
"""


def test_loading_the_kernels_keeps_subnormals(tmp_path):
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: no kernel is loaded")
    env = {"STEPWISE_KERNELS_DIR": str(tmp_path)}  # fresh builds, with the current flags
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env={**os.environ, **env}
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert len(list(tmp_path.glob("*.so"))) == 5
