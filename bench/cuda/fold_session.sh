#!/usr/bin/env bash
# One device call for the decode folds (issues 4, 5) on qwen3-30b-a3b cut to 12 layers: the GPU
# suites; the moe kernel benchmark; the logits of each configuration compared bitwise with the
# default's; decode timed in rounds over the configurations (build-cuda/old/basalt where the
# archive has one; the default; the MoE combine fold off, BASALT_CUDA_MOE_COMBINE_FOLD=0; the
# attention merge fold on, BASALT_CUDA_MERGE_FOLD=1); last, the per-op profile (T = 1) of each.
# Run from the repository root on the GPU machine with build-cuda/ from bench/cuda/pack.sh;
# results in $OUT. Knobs: SKIP_TESTS=1, ROUNDS (default 2).
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
gpu_tests
step timeout 120 $B/bench/cuda/bench_cuda_kernels hybrid > "$OUT/bench_hybrid.txt" 2>&1
grep -E "^moe" "$OUT/bench_hybrid.txt"
model_dir qwen3-30b-a3b:12
# name=ENV pairs of the configurations ("-": none).
CFGS="default=- combine0=BASALT_CUDA_MOE_COMBINE_FOLD=0 merge1=BASALT_CUDA_MERGE_FOLD=1"
env_of() { [ "$1" = - ] && echo NONE=0 || echo "$1"; }
for c in $CFGS; do
  env $(env_of ${c#*=}) timeout 100 $B/basalt logits -m $M --device cuda --tokens $LOGIT_IDS \
    --out /tmp/l_${c%%=*}.npy 2>/dev/null
done
logits_check qwen-folds $M default combine0 merge1
for r in $(seq 1 ${ROUNDS:-2}); do
  if [ -x $B/old/basalt ]; then
    echo "== old round $r" >> "$OUT/ab_folds.txt"
    timeout 120 $B/old/basalt bench -m $M --device cuda -p 512 -n 64 -r 3 --json \
      >> "$OUT/ab_folds.txt" 2>&1
  fi
  for c in $CFGS; do
    echo "== ${c%%=*} round $r" >> "$OUT/ab_folds.txt"
    env $(env_of ${c#*=}) timeout 120 $B/basalt bench -m $M --device cuda -p 512 -n 64 -r 3 \
      --json >> "$OUT/ab_folds.txt" 2>&1
  done
done
bench_summary "$OUT/ab_folds.txt"
for c in $CFGS; do
  env $(env_of ${c#*=}) BASALT_CUDA_PROFILE=1 timeout 120 $B/basalt bench -m $M --device cuda \
    -p 64 -n 32 -r 1 > "$OUT/profile_${c%%=*}.txt" 2>&1
  echo "== profile ${c%%=*}"
  grep -E "^T=1 " "$OUT/profile_${c%%=*}.txt" | head -n 14
done
