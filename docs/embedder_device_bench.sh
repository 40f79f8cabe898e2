#!/usr/bin/env bash
# `memos bench embedder` on a machine with many cores and a GPU, from a checkout of memos where
# only numpy, tokenizers, safetensors, threadpoolctl and torch are installed (no LanceDB, no pydantic).
#
# Before (where the MiniLM weights are installed), write a weights-free model folder into the
# working tree so it travels with it (tokenizer, configs, the weights' shapes: ~0.7 MB):
#     .venv/bin/python -m memos.bench.embedder --export-model bench-model
# Then on the device machine, from the repository root:
#     bash docs/embedder_device_bench.sh [DATASET.json] > $OUT/embedder.log 2>&1
# Reports (JSON) go to ${OUT:-.}/embedder-*.json; docs/benchmarks.md says what to compare.
set -uo pipefail  # each measurement runs even if one before it failed
PY=${PY:-python3}
MODEL=${MODEL:-bench-model}
OUTDIR=${OUT:-.}
DATA=()
if [ $# -ge 1 ]; then DATA=(--dataset "$1"); fi
WEIGHTS=(--model-dir "$MODEL" --random-weights)
if [ -f "$MODEL/model.safetensors" ]; then WEIGHTS=(--model-dir "$MODEL"); fi
export MEMOS_ENCODER_WORKERS=
nproc; "$PY" -c "import torch; print(torch.__version__, torch.cuda.is_available())"
# CPU: one process by BLAS threads, then the pool by workers (one BLAS thread each)
"$PY" -m memos.bench.embedder "${DATA[@]}" "${WEIGHTS[@]}" --workers 1 --threads "${THREADS:-1,2,4,8,16}" --json "$OUTDIR/embedder-threads.json"
"$PY" -m memos.bench.embedder "${DATA[@]}" "${WEIGHTS[@]}" --workers "${WORKERS:-2,4,8,16}" --threads 1 --json "$OUTDIR/embedder-pool.json"
"$PY" -m memos.bench.embedder "${DATA[@]}" "${WEIGHTS[@]}" --workers 16 --threads 1 --pool thread --json "$OUTDIR/embedder-pool-threads.json"
# GPU: fp16 in batches of 256 and 1,024 texts (the first row is the numpy reference; min_cosine against it)
"$PY" -m memos.bench.embedder "${DATA[@]}" "${WEIGHTS[@]}" --device cuda --gpu-batch 256,1024 --passes 3 --json "$OUTDIR/embedder-gpu.json"
