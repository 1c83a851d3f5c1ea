#!/usr/bin/env bash
# One device call for NVFP4 in the wgmma layout (issue 6): the GPU suites (the model suite again
# with BASALT_CUDA_NVFP4_WG=1), the scaled-weight kernel benchmark for NVFP4 in the checkpoint
# layout and in the wgmma layout, then a synthetic llama-3.1-8b quantised to NVFP4 on the device,
# benchmarked end to end with BASALT_CUDA_NVFP4_WG=0 and 1, and its logits under both compared
# bitwise. Run from the repository root on the GPU machine with build-cuda/ from
# bench/cuda/pack.sh; results in $OUT. Knobs: SKIP_TESTS=1, SKIP_KERNELS=1, SKIP_MODELS=1, SHAPES
# (BENCH_SHAPE values, default the four projections), TS (BENCH_T values, default 1 8 16 64).
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
# A smoke run first: a kernel that hangs (an mbarrier waiting forever) ends the call here.
BENCH_FMT=NVFP4-wg BENCH_SHAPE=q/o BENCH_T=1 step timeout 30 $B/bench/cuda/bench_cuda_kernels \
  scaled > "$OUT/smoke.txt" 2>&1
grep -E "^q/o|rc=" "$OUT/smoke.txt"
grep -q "^q/o" "$OUT/smoke.txt" || exit 1
gpu_tests
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  grep -c "PASS .*wgmma layout" "$OUT/test_cuda_kernels.txt"
  BASALT_CUDA_NVFP4_WG=1 step timeout 240 $B/tests/gpu/test_cuda_model \
    > "$OUT/test_cuda_model_wg.txt" 2>&1
  tail -n 1 "$OUT/test_cuda_model_wg.txt"
  grep -E "FAIL" "$OUT/test_cuda_model_wg.txt" | head
fi
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  for s in ${SHAPES:-q/o k/v gate/up down}; do
    for T in ${TS:-1 16 64}; do
      for f in NVFP4 NVFP4-wg; do
        BENCH_FMT=$f BENCH_SHAPE=$s BENCH_T=$T BENCH_CFG=0 \
          timeout 60 $B/bench/cuda/bench_cuda_kernels scaled >> "$OUT/bench_scaled.txt" 2>&1
      done
    done
  done
  grep -E "^(q/o|k/v|gate|down|lm_head)" "$OUT/bench_scaled.txt"
fi
[ "${SKIP_MODELS:-0}" = 1 ] && exit 0
model_dir llama-3.1-8b-nvfp4
for v in 0 1; do
  BASALT_CUDA_NVFP4_WG=$v step timeout 200 $B/basalt bench -m $M --device cuda -p 512 -n 64 -r 2 \
    > "$OUT/bench_nvfp4_wg$v.txt" 2>&1
  grep -v "^\[" "$OUT/bench_nvfp4_wg$v.txt" | tail -n 3
  BASALT_CUDA_NVFP4_WG=$v timeout 100 $B/basalt logits -m $M --device cuda --tokens $LOGIT_IDS \
    --out /tmp/l_wg$v.npy 2>/dev/null
done
BASALT_CUDA_NVFP4_WG=1 logits_check nvfp4 $M wg0 wg1
