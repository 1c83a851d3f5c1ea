#!/usr/bin/env bash
# One device call (see docs/cuda.md): GPU tests, then the end-to-end benchmark of a synthetic
# llama-3.1-8b. Run from the repository root on the GPU machine with build-cuda/{basalt,
# tests/gpu/*, bench/cuda/*, rtlib} carried from the build machine; results go to $OUT.
set -u
B=build-cuda
export LD_LIBRARY_PATH=$PWD/$B/rtlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/gpu.txt"
step() { echo "== $*"; local t0=$SECONDS; "$@"; echo "== rc=$? ($((SECONDS - t0)) s)"; }
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  step $B/tests/gpu/test_cuda_kernels > "$OUT/test_cuda_kernels.txt" 2>&1
  step $B/tests/gpu/test_cuda_model > "$OUT/test_cuda_model.txt" 2>&1
  tail -n 3 "$OUT/test_cuda_kernels.txt" "$OUT/test_cuda_model.txt"
  grep FAIL "$OUT"/test_cuda_*.txt | head -20
  step $B/basalt generate --device cuda -n 48 --temp 0 -p "And it came to pass" 2>&1 | tail -4
fi
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  step $B/bench/cuda/bench_cuda_kernels > "$OUT/bench_cuda_kernels.txt" 2>&1
  cat "$OUT/bench_cuda_kernels.txt"
fi
M=/tmp/llama-3.1-8b
[ -f $M/config.json ] || step $B/basalt synth --preset llama-3.1-8b --dtype bf16 --out $M
step $B/basalt bench -m $M --device cuda ${BENCH:--p 512,2048 -n 64 -r 3} --json \
  > "$OUT/bench_llama8b.jsonl" 2> "$OUT/bench_llama8b.err"
cat "$OUT/bench_llama8b.err" "$OUT/bench_llama8b.jsonl"
