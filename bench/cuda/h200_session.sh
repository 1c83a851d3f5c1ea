#!/usr/bin/env bash
# One device call (see docs/cuda.md): GPU tests, then the end-to-end benchmark of a synthetic
# llama-3.1-8b. Run from the repository root on the GPU machine with build-cuda/{basalt,
# tests/gpu/*, bench/cuda/*, rtlib} carried from the build machine; results go to $OUT.
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv
gpu_tests
[ "${SKIP_TESTS:-0}" = 1 ] ||
  step $B/basalt generate --device cuda -n 48 --temp 0 -p "And it came to pass" 2>&1 | tail -4
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  step $B/bench/cuda/bench_cuda_kernels > "$OUT/bench_cuda_kernels.txt" 2>&1
  cat "$OUT/bench_cuda_kernels.txt"
fi
M=/tmp/llama-3.1-8b
[ -f $M/config.json ] || step $B/basalt synth --preset llama-3.1-8b --dtype bf16 --out $M
step $B/basalt bench -m $M --device cuda ${BENCH:--p 512,2048 -n 64 -r 3} --json \
  > "$OUT/bench_llama8b.txt" 2>&1
cat "$OUT/bench_llama8b.txt"
# The fastest non-exact configuration: cuBLAS prefill.
[ "${SKIP_FAST:-0}" = 1 ] || step $B/basalt bench -m $M --device cuda --fast-prefill -p 512,2048 -n 16 -r 3 --json \
  > "$OUT/bench_llama8b_fast.txt" 2>&1
[ "${SKIP_FAST:-0}" = 1 ] || cat "$OUT/bench_llama8b_fast.txt"
# Per-op breakdown (events around every launch, graphs off).
[ "${SKIP_PROFILE:-0}" = 1 ] || BASALT_CUDA_PROFILE=1 step $B/basalt bench -m $M --device cuda -p 2048 -n 64 -r 1 \
  > "$OUT/profile_llama8b.txt" 2>&1
[ "${SKIP_PROFILE:-0}" = 1 ] || cat "$OUT/profile_llama8b.txt"
if [ "${SERVE:-1}" = 1 ]; then  # issue 4: the server under load (tokenizer: Llama 3's)
  serve_up 8123 "$OUT/serve.log"
  step python3 bench/serve_load.py --url http://127.0.0.1:8123 --streams 1,8,32,64 \
    --prompt-words 400 --max-tokens 256 --system-words 1500 | tee "$OUT/serve_load.jsonl"
  kill %1; wait
  tail -n 5 "$OUT/serve.log"
  if [ "${SERVE_PROFILE:-0}" = 1 ]; then  # the same at 64 streams with per-op kernel times
    BASALT_CUDA_PROFILE=1 serve_up 8124 "$OUT/serve_profile.log"
    python3 bench/serve_load.py --url http://127.0.0.1:8124 --streams 64 --prompt-words 400 \
      --max-tokens 128 --system-words 10 | tee -a "$OUT/serve_profile.log"
    kill %1; wait
    grep -v "^POST" "$OUT/serve_profile.log" | tail -n 45
  fi
fi
