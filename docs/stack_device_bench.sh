#!/usr/bin/env bash
# memos with LanceDB -- `memos ingest` on each encoder device, then `memos bench serve` -- on a machine with many cores where memos' dependencies are not installed and
# nothing can be fetched: they travel unpacked in one xz tarball (.whl/site.tar.xz: the packages
# installed with `pip install --no-deps --target` for the machine's Python and platform; LanceDB's
# wheel alone is over the transfer limit, its unpacked library compresses better; leave out what the
# machine has: numpy, pyarrow, tokenizers, uvloop), memos as a wheel.
# Before, here: memos' own wheel into .whl (`pip wheel --no-deps -w .whl .`) and, where the MiniLM
# weights are installed, the weights-free model folder:
#     .venv/bin/python -m memos.bench.embedder --export-model bench-model
# The local embedder then runs random weights of MiniLM's shapes (same FLOPs, meaningless vectors:
# throughput only). From the repository root on that machine:
#     bash docs/stack_device_bench.sh [LOCOMO.json] > $OUT/stack.log 2>&1
set -euo pipefail
OUTDIR=$(realpath "${OUT:-.}")
SITE=${SITE:-/tmp/site}
PY=${PY:-python3}
mkdir -p "$SITE"
tar xJf .whl/site.tar.xz -C "$SITE"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
export PYTHONPATH="$SITE" LANCE_LOG=error
MODEL=${MODEL:-bench-model}
if [ ! -f "$MODEL/model.safetensors" ]; then
  "$PY" -c "import sys; from safetensors.numpy import save_file; from memos.sentence_encoder import random_weights; save_file(random_weights(sys.argv[1]), sys.argv[1] + '/model.safetensors')" "$MODEL"
fi
export MEMOS_LOCAL_MODEL_DIR="$PWD/$MODEL"
DATA=${1:+$(realpath "$1")}
nproc
cd /tmp  # so that the tree's memos/ does not shadow the installed package
if [ -n "$DATA" ]; then
  for device in ${DEVICES:-cpu cuda}; do
    rm -rf "/tmp/ingest-$device"
    "$PY" -m memos.cli init "/tmp/ingest-$device" > /dev/null
    echo "== memos ingest, encoder on $device"
    start=$EPOCHREALTIME
    MEMOS_ENCODER_DEVICE=$device "$PY" -m memos.cli ingest "$DATA" --db "/tmp/ingest-$device" | tail -3
    awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "wall_s %.1f\n", b - a }'
  done
fi
# the servers' local encoder on the CPU unless SERVE_DEVICE says otherwise: where torch sees a GPU
# the default would move it there (measured apart: docs/benchmarks.md, "Served on 16 cores again")
MEMOS_ENCODER_DEVICE=${SERVE_DEVICE:-cpu} "$PY" -m memos.cli bench serve --clients "${CLIENTS:-1,20,100}" --embedder "${EMBEDDERS:-none,local}" \
  --servers "${SERVERS:-1,2}" --writes "${WRITES:-10}" --searches "${SEARCHES:-10}" \
  --time-limit "${TIME_LIMIT:-30}" --json "$OUTDIR/serve.json"
