#!/usr/bin/env bash
# Sets up .venv (if needed) and runs the whole test suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# the vLLM engine's tests need .venv-vllm; the NEON kernel checks a cross compiler and qemu
STEPWISE_WITH_VLLM=1 STEPWISE_WITH_CROSS_CHECKS=1 ./scripts/setup.sh
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
set +e
.venv/bin/python -m pytest -q --durations=25 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
