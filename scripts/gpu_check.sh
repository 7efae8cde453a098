#!/usr/bin/env bash
# Issue 9's GPU checks in one go, for a session that has a CUDA GPU: the `gpu`-marked tests
# (the kernel cases on CUDA, CUDA graphs vs eager), bench/kernels.py (each kernel's bandwidth
# vs device copy) and the GPU engine bench (Qwen2.5-1.5B-shaped random weights, 256
# requests, vs HF generate and the roofline). Everything lands in $OUT (default
# bench/gpu-results/): env.txt, *.txt logs, kernels.json, engine_throughput.json.
#
#   OUT=/some/dir scripts/gpu_check.sh [all|tests|kernels|engine]   (default: all)
#
# Where one command may run at most 10 minutes, run the three parts as separate calls
# (tests, kernels, engine); the time limits below are per part.
# Needs a CUDA build of torch and triton (pip install -e '.[dev,gpu]' with a CUDA torch).
# Each step has its own time limit so one hang does not eat the rest; the exit status is
# the first failing step's.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/gpu-results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset TRITON_INTERPRET STEPWISE_KERNELS  # compiled kernels, auto dispatch
rc=0

step() {  # step NAME LIMIT_S CMD... : run, log to $OUT/NAME.txt, remember the first failure
  local name=$1 limit=$2
  shift 2
  echo "== $name ($*)"
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local code=$?
  tail -n 25 "$OUT/$name.txt"
  echo "== $name: exit $code"
  if [ "$code" -ne 0 ] && [ "$rc" -eq 0 ]; then rc=$code; fi
}

{
  nvidia-smi || true
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'triton', triton.__version__, torch.cuda.get_device_name())"
  git describe --always --dirty 2>/dev/null || true
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

part=${1:-all}
case "$part" in all | tests | kernels | engine) ;; *) echo "unknown part $part" >&2; exit 2 ;; esac
if [ "$part" = all ] || [ "$part" = tests ]; then
  step gpu_tests 300 "$PY" -m pytest -q -m gpu -p no:cacheprovider \
    tests/unit/kernels tests/unit/engine/test_cuda_graph.py
fi
if [ "$part" = all ] || [ "$part" = kernels ]; then
  step kernels 240 "$PY" bench/kernels.py --json-out "$OUT/kernels.json"
fi
if [ "$part" = all ] || [ "$part" = engine ]; then
  step engine_throughput 540 "$PY" bench/engine_throughput.py --device cuda \
    --random-model qwen2.5-1.5b --num-requests 256 --dtypes bfloat16 --sides hf,stepwise \
    --json-out "$OUT/engine_throughput.json"
fi
echo "results in $OUT (record them in bench/RESULTS.md with the GPU named)"
exit "$rc"
