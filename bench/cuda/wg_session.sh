#!/usr/bin/env bash
# One device call for NVFP4 and FP8 in the wgmma layout (issue 6) and the decode folds (issues
# 4, 5): the GPU suites (the model suite again with BASALT_CUDA_NVFP4_WG=0 BASALT_CUDA_FP8_WG=0:
# the checkpoint layouts; the wgmma layouts are the default),
# the scaled-weight kernel benchmark for NVFP4 and FP8 in the checkpoint layout and in the wgmma
# layout; then, where the archive has build-cuda/old/basalt (pack.sh OLD=DIR: a build without the
# folds), qwen3-30b-a3b cut to 12 layers and llama-3.1-8b (bf16) with logits compared bitwise and
# decode timed old / new alternating (the MoE combine and the attention merge folded into the
# kernels before them); llama-3.1-8b quantised to NVFP4 and to FP8 on the device, each
# benchmarked with its layout off and on (BASALT_CUDA_NVFP4_WG / BASALT_CUDA_FP8_WG = 0, 1), its
# logits under both compared bitwise; last, decode steps of 64 sequences (`basalt bench --batch
# 64`, and its per-op profile). Run from the repository root on the GPU machine with build-cuda/
# from bench/cuda/pack.sh; results in $OUT. Knobs: SKIP_TESTS=1, SKIP_KERNELS=1, SKIP_MODELS=1,
# SKIP_AB=1, SKIP_BATCH=1, SHAPES (BENCH_SHAPE values, default the four projections), TS
# (BENCH_T values, default 1 16 64).
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
# A smoke run first: a kernel that hangs (an mbarrier waiting forever) ends the call here.
BENCH_FMT=NVFP4-wg BENCH_SHAPE=q/o BENCH_T=1 step timeout 30 $B/bench/cuda/bench_cuda_kernels \
  scaled > "$OUT/smoke.txt" 2>&1
grep -E "^q/o|rc=" "$OUT/smoke.txt"
grep -q "^q/o" "$OUT/smoke.txt" || exit 1
# FP8's layout smoke-tested too; where it fails, its runs are left out below.
FMTS="NVFP4 NVFP4-wg FP8 FP8-wg"
BENCH_FMT=FP8-wg BENCH_SHAPE=q/o BENCH_T=1 step timeout 30 $B/bench/cuda/bench_cuda_kernels \
  scaled > "$OUT/smoke8.txt" 2>&1
grep -E "^q/o|rc=" "$OUT/smoke8.txt"
grep -q "^q/o" "$OUT/smoke8.txt" || FMTS="NVFP4 NVFP4-wg FP8"
gpu_tests
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  grep -c "PASS .*wgmma layout" "$OUT/test_cuda_kernels.txt"
  BASALT_CUDA_NVFP4_WG=0 BASALT_CUDA_FP8_WG=0 step timeout ${TEST_TIMEOUT:-240} \
    $B/tests/gpu/test_cuda_model \
    > "$OUT/test_cuda_model_wg.txt" 2>&1
  tail -n 1 "$OUT/test_cuda_model_wg.txt"
  grep -E "FAIL" "$OUT/test_cuda_model_wg.txt" | head
fi
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  for s in ${SHAPES:-q/o k/v gate/up down}; do
    for T in ${TS:-1 16 64}; do
      for f in $FMTS; do
        BENCH_FMT=$f BENCH_SHAPE=$s BENCH_T=$T BENCH_CFG=0 \
          timeout 60 $B/bench/cuda/bench_cuda_kernels scaled >> "$OUT/bench_scaled.txt" 2>&1
      done
    done
  done
  grep -E "^(q/o|k/v|gate|down|lm_head)" "$OUT/bench_scaled.txt"
fi
[ "${SKIP_MODELS:-0}" = 1 ] && exit 0
O=$B/old
if [ "${SKIP_AB:-0}" != 1 ] && [ -x $O/basalt ]; then
  for spec in qwen3-30b-a3b:12 llama-3.1-8b; do
    model_dir $spec
    n=$(basename $M)
    $O/basalt logits -m $M --device cuda --tokens $LOGIT_IDS --out /tmp/l_old.npy 2>/dev/null
    $B/basalt logits -m $M --device cuda --tokens $LOGIT_IDS --out /tmp/l_new.npy 2>/dev/null
    logits_check $n $M new old
    for r in 1 2; do
      for v in old new; do
        bin=$B/basalt
        [ $v = old ] && bin=$O/basalt
        echo "== $n $v round $r" >> "$OUT/ab_$n.txt"
        timeout 120 $bin bench -m $M --device cuda -p 512 -n 64 -r 3 --json >> "$OUT/ab_$n.txt" 2>&1
      done
    done
    bench_summary "$OUT/ab_$n.txt"
  done
fi
QS="nvfp4 fp8"
[ "$FMTS" = "NVFP4 NVFP4-wg FP8 FP8-wg" ] || QS=nvfp4
for q in $QS; do
  model_dir llama-3.1-8b-$q
  var=BASALT_CUDA_NVFP4_WG
  [ $q = fp8 ] && var=BASALT_CUDA_FP8_WG
  for v in 0 1; do
    env $var=$v timeout 200 $B/basalt bench -m $M --device cuda -p 512 -n 64 -r 3 \
      > "$OUT/bench_${q}_wg$v.txt" 2>&1
    echo "== $q $var=$v rc=$?"
    grep -v "^\[" "$OUT/bench_${q}_wg$v.txt" | tail -n 3
    env $var=$v timeout 100 $B/basalt logits -m $M --device cuda --tokens $LOGIT_IDS \
      --out /tmp/l_wg$v.npy 2>/dev/null
  done
  export $var=1  # the logits under chunks 1 and 64 with the layout on
  logits_check $q $M wg0 wg1
  unset $var
done
if [ "${SKIP_BATCH:-0}" != 1 ]; then
  model_dir llama-3.1-8b
  step timeout 120 $B/basalt bench -m $M --device cuda -p 512 -n 32 -r 2 --batch 64 \
    > "$OUT/batch64.txt" 2>&1
  grep -E "sequences together|^ +512" "$OUT/batch64.txt"
  BASALT_CUDA_PROFILE=1 timeout 120 $B/basalt bench -m $M --device cuda -p 512 -n 8 -r 1 \
    --batch 64 > "$OUT/profile_batch64.txt" 2>&1
  grep -E "^T<=64" "$OUT/profile_batch64.txt" | head -n 16
fi

