#!/usr/bin/env bash
# One device call for the hybrid and MoE models (issue 5; see docs/cuda.md): optionally the GPU
# tests, then for each synthetic model in MODELS: synth (depth-cut with --layers when the
# machine's disk cannot hold the whole model), bench at contexts 512 / 2048 / 32K, and a per-op
# profile of decode at context 512. Run from the repository root on the GPU machine with
# build-cuda/{basalt, tests/gpu/*, rtlib} carried from the build machine; results go to $OUT.
#
#   MODELS="qwen3-30b-a3b:12 qwen3.5-27b:16"   preset[:layers] (0 or absent: all layers)
#   SKIP_TESTS=1     skip the GPU tests
#   LONG=0           skip the 32K-context run
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv
df -h /tmp | tail -n 1
gpu_tests
for spec in ${MODELS:-qwen3-30b-a3b:12 qwen3.5-27b:16 qwen3.5-35b-a3b:10}; do
  preset=${spec%%:*}
  layers=${spec#*:}
  [ "$layers" = "$spec" ] && layers=0
  M=/tmp/$preset-$layers
  tag=$preset
  [ "$layers" != 0 ] && tag=$preset-${layers}l
  [ -f $M/config.json ] || step $B/basalt synth --preset "$preset" --layers "$layers" --out $M
  step $B/basalt bench -m $M --device cuda -p 512,2048 -n 64 -r 3 --json \
    > "$OUT/bench_$tag.txt" 2>&1
  cat "$OUT/bench_$tag.txt"
  if [ "${LONG:-1}" = 1 ]; then
    step $B/basalt bench -m $M --device cuda -p 32768 -n 32 -r 1 --json \
      > "$OUT/bench_${tag}_32k.txt" 2>&1
    cat "$OUT/bench_${tag}_32k.txt"
  fi
  BASALT_CUDA_PROFILE=1 step $B/basalt bench -m $M --device cuda -p 512 -n 64 -r 1 \
    > "$OUT/profile_$tag.txt" 2>&1
  tail -n 40 "$OUT/profile_$tag.txt"
  rm -rf $M
done
