#!/usr/bin/env bash
# One device call for serving batches (issue 4). For each environment setting in ENVS (default
# "BASALT_CUDA_FUSE=1", the defaults; each VAR=VALUE applied to the runs below, e.g. a variant's
# switch while it is measured against the default): the
# llama-3.1-8b matmuls at MM_T rows (`bench_cuda_kernels matmul`, default 32 and 64), the time
# of 32- and 64-row passes (`basalt bench --verify-rows`), and `serve` (--step-tokens STEP,
# default 1024) under bench/serve_load.py at STREAMS (default 64,64; every request its own
# prompt). PROFILE64=1 adds the per-op times of 64-row passes; BATCH64=0 leaves out the decode
# steps of 64 sequences (below); the GPU suites run last under the
# last setting (SKIP_TESTS=1: not). Run from the repository root on the GPU machine with
# build-cuda/ from bench/cuda/pack.sh; results in $OUT.
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
ENVS=${ENVS:-BASALT_CUDA_FUSE=1}
for T in ${MM_T:-32 64}; do
  for e in $ENVS; do
    echo "== matmul T=$T $e"
    env $e BENCH_T=$T $B/bench/cuda/bench_cuda_kernels matmul 2>&1 |
      grep -E "Auto|RowsTMA|TileTMA64|copy" | tee -a "$OUT/matmul.txt"
  done
done
model_dir ${MODEL:-llama-3.1-8b}
for e in $ENVS; do
  echo "== $e" | tee -a "$OUT/verify64.txt"
  env $e $B/basalt bench -m $M --device cuda -p 512 -n 8 -r 3 --verify-rows 32,64 \
    >> "$OUT/verify64.txt" 2>&1
  grep -E "verification|^ +512" "$OUT/verify64.txt" | tail -n 3
  if [ "${PROFILE64:-0}" = 1 ]; then
    env $e BASALT_CUDA_PROFILE=1 $B/basalt bench -m $M --device cuda -p 512 -n 2 -r 1 \
      --verify-rows 64 > "$OUT/profile64_${e##*=}.txt" 2>&1
  fi
done
# Decode steps of BATCH (default 64) sequences, each its own 512-token history (`basalt bench
# --batch`): a serving decode step without the server, and its per-op times (the T<=64 rows).
if [ "${BATCH64:-1}" = 1 ]; then
  for e in $ENVS; do
    echo "== $e" | tee -a "$OUT/batch64.txt"
    env $e $B/basalt bench -m $M --device cuda -p 512 -n 32 -r 2 --batch ${BATCH:-64} \
      >> "$OUT/batch64.txt" 2>&1
    grep -E "sequences together|^ +512" "$OUT/batch64.txt" | tail -n 2
    env $e BASALT_CUDA_PROFILE=1 $B/basalt bench -m $M --device cuda -p 512 -n 8 -r 1 \
      --batch ${BATCH:-64} > "$OUT/profile_batch_${e##*=}.txt" 2>&1
    grep -E "^T<=64" "$OUT/profile_batch_${e##*=}.txt" | head -n 16
  done
fi
if [ "${SERVE:-1}" = 1 ]; then
  for e in $ENVS; do
    export $e
    SERVE_ARGS="--step-tokens ${STEP:-1024}" serve_up 8123 "$OUT/serve_${e##*=}.log"
    echo "== serve $e, step tokens ${STEP:-1024}" | tee -a "$OUT/serve_load.jsonl"
    step timeout 240 python3 bench/serve_load.py --url http://127.0.0.1:8123 \
      --streams ${STREAMS:-64,64} --prompt-words 400 --max-tokens 256 \
      --system-words ${SYSTEM_WORDS:-1980} | tee -a "$OUT/serve_load.jsonl"
    kill %1; wait
    tail -n 1 "$OUT/serve_${e##*=}.log"
  done
fi
gpu_tests
