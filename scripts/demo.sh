#!/usr/bin/env bash
# Sets up .venv (if needed), then runs the whole pipeline locally (embedded Kafka-compatible
# broker, Redis, ingest/prefill/decode workers, the bundled tiny reasoner) on held-out problems.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/stepwise demo "$@"
