#!/usr/bin/env bash
# Sets up .venv (if needed), then shows the engine reasoning step by step and scores it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
source .venv/bin/activate
echo
echo "== the bundled tiny reasoner, one problem, streamed =="
stepwise generate --model tiny-reasoner --temperature 0.7 --seed 1 --max-tokens 200 \
  "${STEPWISE_DEMO_PROBLEM:-A box holds 7 rows of 8 apples. 13 apples are eaten. How many are left?}"
echo
echo "== the tiny reasoner on 40 held-out problems =="
stepwise eval --model tiny-reasoner --n 10 --seed 7 --out demo-eval.json
