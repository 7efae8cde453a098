#!/usr/bin/env bash
# The one prepared GPU run (issue 25), for a session that is lent a CUDA GPU. Everything lands
# in $OUT (default bench/gpu-results/): env.txt, one NAME.txt log per step, *.json figures.
#
#   OUT=/some/dir scripts/gpu_check.sh [all|STEP ...]   run (default: all steps, in order)
#   scripts/gpu_check.sh --dry-run                       check the script itself, on CPU
#   scripts/gpu_check.sh --list                          the steps and their time limits
#
# Steps (each with its own time limit, so one hang does not eat the rest; about 8 min in all):
#   parity        the engine on CUDA vs HF on CUDA, bf16 and fp32, every random tiny family and
#                 SmolLM2 when its files are there (tests/unit/engine/test_parity_cuda.py)
#   gpu_tests     every `gpu`-marked test: Triton kernels vs their references, CUDA graphs vs
#                 eager, cuda_ipc between two processes
#   kernels       bench/kernels.py: paged decode attention at batch 64, context 4k, vs the
#                 device-to-device copy bandwidth of the same run (target >= 70%)
#   engine        bench/engine_throughput.py: Qwen2.5-1.5B-shaped random weights, 256 requests,
#                 vs HF generate in the same run (targets >= 10x HF, >= 50% of the roofline)
#   pipeline      bench/pipeline_overhead.py: the local stack with the engine on CUDA and KV
#                 handed off by cuda_ipc, vs the engine alone
# The exit status is the first failing step's. The dry run (CI runs it: tests/unit/test_gpu_
# check.py) checks the shell syntax, that every test selection collects tests, and that every
# flag a bench step passes is one its --help lists; it starts nothing on a GPU.
# Needs a CUDA build of torch and triton (the device machine has both).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/gpu-results}
PY=${PYTHON:-python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# NAME|LIMIT_S|COMMAND (one line each; $OUT is expanded when the step runs)
STEPS=(
  "parity|70|$PY -m pytest -q -m gpu -p no:cacheprovider tests/unit/engine/test_parity_cuda.py"
  "gpu_tests|70|$PY -m pytest -q -m gpu -p no:cacheprovider tests/unit/kernels tests/unit/engine/test_cuda_graph.py tests/unit/transfer/test_cuda_ipc.py"
  "kernels|50|$PY bench/kernels.py --json-out \$OUT/kernels.json"
  "engine|140|$PY bench/engine_throughput.py --device cuda --random-model qwen2.5-1.5b --num-requests 256 --dtypes bfloat16 --sides hf,stepwise --json-out \$OUT/engine_throughput.json"
  "pipeline|150|env STEPWISE_KV_TRANSPORT=cuda_ipc $PY bench/pipeline_overhead.py --n 128"
)

name_of() { echo "${1%%|*}"; }
limit_of() { local rest=${1#*|}; echo "${rest%%|*}"; }
cmd_of() { local rest=${1#*|}; echo "${rest#*|}"; }

dry_run() {  # on CPU: the script's own parts, nothing on a GPU
  local bad=0 total=0
  bash -n "$0" || { echo "dry-run: syntax error in $0"; return 1; }
  for s in "${STEPS[@]}"; do
    local name cmd limit
    name=$(name_of "$s") limit=$(limit_of "$s") cmd=$(cmd_of "$s")
    total=$((total + limit))
    [[ "$limit" =~ ^[0-9]+$ ]] || { echo "dry-run: $name: bad limit '$limit'"; bad=1; continue; }
    read -r -a argv <<<"${cmd//\$OUT/$OUT}"
    while [ "${argv[0]}" = env ] || [[ "${argv[0]}" == *=* ]]; do argv=("${argv[@]:1}"); done
    if [ "${argv[1]}" = -m ] && [ "${argv[2]}" = pytest ]; then
      local n
      n=$(TRITON_INTERPRET=1 "${argv[@]}" --collect-only 2>/dev/null | grep -c "::")
      if [ "$n" -lt 1 ]; then echo "dry-run: $name: its tests collect nothing"; bad=1; fi
      echo "dry-run: $name: $n tests collected"
    else
      local script=${argv[1]} help
      [ -f "$script" ] || { echo "dry-run: $name: $script is missing"; bad=1; continue; }
      help=$("$PY" "$script" --help 2>&1) || { echo "dry-run: $name: $script --help fails"; bad=1; }
      for a in "${argv[@]:2}"; do
        if [[ "$a" == --* ]] && ! grep -q -- "${a%%=*}" <<<"$help"; then
          echo "dry-run: $name: $script has no flag $a"; bad=1
        fi
      done
      echo "dry-run: $name: $script and its flags ok"
    fi
  done
  echo "dry-run: $((total)) s of step limits (the run must fit 8 minutes: 480 s)"
  [ "$total" -le 480 ] || bad=1
  return "$bad"
}

case "${1:-all}" in
  --dry-run) dry_run; exit $? ;;
  --list) for s in "${STEPS[@]}"; do echo "$(name_of "$s") $(limit_of "$s") s"; done; exit 0 ;;
esac

mkdir -p "$OUT"
unset TRITON_INTERPRET STEPWISE_KERNELS  # compiled kernels, auto dispatch
{
  nvidia-smi || true
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'triton', triton.__version__, torch.cuda.get_device_name())"
  git describe --always --dirty 2>/dev/null || true
} >>"$OUT/env.txt" 2>&1  # appended: a prelude may have written the setup there
cat "$OUT/env.txt"

wanted=("$@")
[ ${#wanted[@]} -eq 0 ] || [ "${wanted[0]}" = all ] && wanted=()
rc=0
for s in "${STEPS[@]}"; do
  name=$(name_of "$s") limit=$(limit_of "$s") cmd=$(cmd_of "$s")
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  echo "== $name (limit $limit s): ${cmd//\$OUT/$OUT}"
  read -r -a argv <<<"${cmd//\$OUT/$OUT}"
  timeout "$limit" "${argv[@]}" >"$OUT/$name.txt" 2>&1
  code=$?
  tail -n 25 "$OUT/$name.txt"
  echo "== $name: exit $code"
  if [ "$code" -ne 0 ] && [ "$rc" -eq 0 ]; then rc=$code; fi
done
echo "results in $OUT (record them in bench/RESULTS.md with the GPU named)"
exit "$rc"
