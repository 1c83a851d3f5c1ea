#!/usr/bin/env bash
# One device call for the NVFP4 fragment layout (issue 6): the GPU suites, the scaled-weight
# kernel benchmark for NVFP4 in the checkpoint layout (the fused cp.async kernel) and in the
# fragment layout, then a synthetic llama-3.1-8b quantised to NVFP4 on the device, benchmarked
# end to end with BASALT_CUDA_NVFP4_FRAG=0 (checkpoint layout, the default) and 1, and its
# logits under both compared bitwise. Run from the repository root on the GPU machine with
# build-cuda/{basalt, tests/gpu/*, bench/cuda/*, rtlib} carried; results in $OUT. Knobs:
# SKIP_TESTS=1, SKIP_KERNELS=1, SKIP_MODELS=1, SHAPES (BENCH_SHAPE values, default the four
# projections).
. "$(dirname "$0")/session_common.sh"
gpu_tests
if [ "${SKIP_TESTS:-0}" != 1 ]; then  # the model suite again with NVFP4 in the fragment layout
  BASALT_CUDA_NVFP4_FRAG=1 step $B/tests/gpu/test_cuda_model > "$OUT/test_cuda_model_frag.txt" 2>&1
  tail -n 1 "$OUT/test_cuda_model_frag.txt"
  grep -E "FAIL" "$OUT/test_cuda_model_frag.txt" | head
fi
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  for f in NVFP4-frag NVFP4; do
    for s in ${SHAPES:-q/o k/v gate/up down}; do
      BENCH_FMT=$f BENCH_SHAPE=$s step $B/bench/cuda/bench_cuda_kernels scaled \
        >> "$OUT/bench_scaled.txt" 2>&1
    done
  done
  grep -E "^(q/o|k/v|gate|down|lm_head)" "$OUT/bench_scaled.txt"
fi
[ "${SKIP_MODELS:-0}" = 1 ] && exit 0
model_dir llama-3.1-8b-nvfp4
for fr in 0 1; do
  BASALT_CUDA_NVFP4_FRAG=$fr step $B/basalt bench -m $M --device cuda -p 512 -n 64 -r 3 --json \
    > "$OUT/bench_nvfp4_frag$fr.txt" 2>&1
  grep -v "^\[" "$OUT/bench_nvfp4_frag$fr.txt" | tail -n 4
  BASALT_CUDA_NVFP4_FRAG=$fr $B/basalt logits -m $M --device cuda --tokens $LOGIT_IDS \
    --out /tmp/l_frag$fr.npy 2>/dev/null
done
BASALT_CUDA_NVFP4_FRAG=1 logits_check nvfp4 $M frag0 frag1
