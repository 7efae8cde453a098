"""The control plane (ingest, budget, gateway, verify) never loads torch: each worker's module
is imported, and ingest's model loading run, in a fresh interpreter that then reports whether
torch (or the engine's kernels) got imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "triton", "pipeline.kernels", "pipeline.engine.engine")

CASES = {
    "ingest": (
        "import pipeline.cli.main\n"
        "import pipeline.ingest.worker as w\n"
        "from pipeline.engine.model_config import ModelConfig\n"
        "from pipeline.models.resolve import resolve_model\n"
        "from pipeline.engine.tokenizer import Tokenizer\n"
        "path = resolve_model('tiny-reasoner')\n"
        "ModelConfig.from_dir(path); Tokenizer(path).encode('Q: 1 + 1')\n"  # what setup() loads
    ),
    "budget": "import pipeline.controller.worker\n",
    "gateway": "from pipeline.gateway.app import create_app\nimport pipeline.gateway.main\n",
    "verify": "from pipeline.verify import tasks, worker\n",
}


@pytest.mark.parametrize("stage", sorted(CASES))
def test_control_plane_worker_imports_no_torch(stage):
    code = CASES[stage] + (f"import sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_the_engine_package_still_exports_its_names():
    from pipeline import engine

    assert (
        engine.Engine.__name__ == "Engine" and engine.SamplingParams(max_tokens=3).max_tokens == 3
    )
    with pytest.raises(AttributeError):
        engine.NoSuchThing  # noqa: B018
