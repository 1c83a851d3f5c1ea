#!/usr/bin/env bash
# One device call for the scaled decode launches grouped (issue 6): q / k / v in one launch and
# gate / up with SwiGLU in one over weights in the wgmma layout (default; BASALT_CUDA_SCALED_GROUP=0
# runs a launch per weight and swiglu; BASALT_CUDA_SCALED_SWIGLU=0 keeps q / k / v grouped and
# gate / up apart). First the scaled-weight kernel tests alone (BASALT_TEST_ONLY=scaled), then the
# GPU suites (SKIP_TESTS=1: not), then for llama-3.1-8b quantised on the device (QS, default
# "nvfp4 fp8"): logits with the grouping off and on compared bitwise (and prefill chunks 1 and
# 64); decode timed under each of SETS (default the three settings: off, q / k / v only, both)
# alternating (ROUNDS, default 2; `basalt bench -p 512 -n 64 -r 3`); the per-op profile of 16
# decode steps (BASALT_CUDA_PROFILE=1, graphs off) under PROFILE_SETS; last (FIRST=1, the
# default), the first pass after loading with lazy and eager module loading (`-r 3`, each run's
# TTFT). Run from the repository root on the GPU machine with build-cuda/ from
# bench/cuda/pack.sh; results in $OUT.
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
# The scaled-weight kernel tests alone, in seconds.
BASALT_TEST_ONLY=scaled step timeout 90 $B/tests/gpu/test_cuda_kernels > "$OUT/test_scaled.txt" 2>&1
tail -n 1 "$OUT/test_scaled.txt"
grep FAIL "$OUT/test_scaled.txt" | head -5
gpu_tests
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  grep -c "PASS matmul_scaled_group\|PASS matmul_scaled_swiglu" "$OUT/test_cuda_kernels.txt"
fi
for q in ${QS:-nvfp4 fp8}; do
  model_dir llama-3.1-8b-$q
  n=$(basename $M)
  BASALT_CUDA_SCALED_GROUP=0 $B/basalt logits -m $M --device cuda --tokens $LOGIT_IDS \
    --out /tmp/l_off.npy 2>/dev/null
  $B/basalt logits -m $M --device cuda --tokens $LOGIT_IDS --out /tmp/l_on.npy 2>/dev/null
  logits_check $n $M on off
  SETS=${SETS:-BASALT_CUDA_SCALED_GROUP=0 BASALT_CUDA_SCALED_SWIGLU=0 BASALT_CUDA_SCALED_GROUP=1}
  for r in $(seq ${ROUNDS:-2}); do
    for e in $SETS; do
      echo "== $n $e round $r" >> "$OUT/ab_$n.txt"
      env $e timeout 120 $B/basalt bench -m $M --device cuda -p 512 -n 64 -r 3 --json \
        >> "$OUT/ab_$n.txt" 2>&1
    done
  done
  bench_summary "$OUT/ab_$n.txt"
  for e in ${PROFILE_SETS:-BASALT_CUDA_SCALED_GROUP=0 BASALT_CUDA_SCALED_GROUP=1}; do
    f="$OUT/profile_${n}_$(echo "${e#BASALT_CUDA_}" | tr = _).txt"
    env $e BASALT_CUDA_PROFILE=1 timeout 120 $B/basalt bench -m $M --device cuda -p 512 -n 16 \
      -r 1 > "$f" 2>&1
    echo "== $n $e per-op profile (T=1 rows)"
    grep -E "^T=1 " "$f" | head -20
  done
  if [ "${FIRST:-1}" = 1 ]; then
    for loading in LAZY EAGER; do
      CUDA_MODULE_LOADING=$loading timeout 120 $B/basalt bench -m $M --device cuda -p 512 -n 8 \
        -r 3 --json > "$OUT/first_${n}_$loading.txt" 2>&1
      echo "== $n $loading: $(grep -o '"ttft_ms_each":\[[^]]*\]' "$OUT/first_${n}_$loading.txt")"
    done
  fi
done
