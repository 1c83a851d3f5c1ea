#!/usr/bin/env bash
# One device call for serving decode steps (issue 4), its parts run in the order of ORDER
# (default "kernels ab profiles serve tests"):
#  kernels   the batched decode attention kernels alone (`bench_cuda_kernels attn-batch`: Auto
#            told the rows are sequences of their own, and each Split kernel);
#  ab        for llama-3.1-8b bf16 (MODEL), decode steps of 64 sequences (`basalt bench --batch
#            64`) with the batch hint off and on alternating (BASALT_CUDA_ATTN_BATCH=0 / 1;
#            ROUNDS, default 2);
#  profiles  the per-op profile of each;
#  serve     `serve` under bench/serve_load.py at STREAMS (default 1,8,32,64; 400-word prompts,
#            256 tokens out, then the repeated 1,980-word system prompt);
#  tests     the GPU suites (SKIP_TESTS=1: not).
# Results in $OUT.
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
SETS="BASALT_CUDA_ATTN_BATCH=0 BASALT_CUDA_ATTN_BATCH=1"
kernels() {
  step timeout 120 $B/bench/cuda/bench_cuda_kernels attn-batch 2>&1 | tee "$OUT/attn_batch.txt"
}
ab() {
  for r in $(seq ${ROUNDS:-2}); do
    for e in $SETS; do
      echo "== $e round $r" | tee -a "$OUT/batch64.txt"
      env $e timeout 120 $B/basalt bench -m $M --device cuda -p 512 -n 32 -r 2 --batch 64 \
        >> "$OUT/batch64.txt" 2>&1
      grep -E "sequences together|^ +512" "$OUT/batch64.txt" | tail -n 2
    done
  done
}
profiles() {
  for e in $SETS; do
    env $e BASALT_CUDA_PROFILE=1 timeout 120 $B/basalt bench -m $M --device cuda -p 512 -n 8 \
      -r 1 --batch 64 > "$OUT/profile_batch_${e##*=}.txt" 2>&1
    echo "== $e per-op (T<=64)"
    grep -E "^T<=64" "$OUT/profile_batch_${e##*=}.txt" | head -n 6
  done
}
serve() {
  SERVE_ARGS="--step-tokens 1024" serve_up 8123 "$OUT/serve.log"
  step timeout 240 python3 bench/serve_load.py --url http://127.0.0.1:8123 \
    --streams ${STREAMS:-1,8,32,64} --prompt-words 400 --max-tokens 256 |
    tee -a "$OUT/serve_load.jsonl"
  kill %1
  wait
  tail -n 2 "$OUT/serve.log"
}
tests() { gpu_tests; }
model_dir ${MODEL:-llama-3.1-8b}
for part in ${ORDER:-kernels ab profiles serve tests}; do $part; done
