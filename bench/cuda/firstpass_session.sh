#!/usr/bin/env bash
# One device call for the first pass after loading (bench/RESULTS.md, twenty-fourth session: the
# first 512-token prefill of llama-3.1-8b NVFP4 took ≈ 1.2 s more than the next ones while its
# kernels took ≈ 37 ms): each run's TTFT (`bench --json`'s ttft_ms_each) for bf16 and NVFP4, with
# CUDA's lazy module loading (the default) and eager (CUDA_MODULE_LOADING=EAGER: every kernel
# loaded at start, outside the runs), and the first pass's kernels timed alone
# (BASALT_CUDA_PROFILE=1, -r 1). Run from the repository root on the GPU machine with
# build-cuda/ from bench/cuda/pack.sh; results in $OUT.
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for spec in llama-3.1-8b llama-3.1-8b-nvfp4; do
  model_dir $spec > /dev/null
  n=$(basename $M)
  for loading in LAZY EAGER; do
    CUDA_MODULE_LOADING=$loading timeout 200 $B/basalt bench -m $M --device cuda -p 512 -n 8 \
      -r 3 --json > "$OUT/first_${n}_$loading.txt" 2>&1
    echo "== $n $loading: $(grep -o '"ttft_ms_each":\[[^]]*\]' "$OUT/first_${n}_$loading.txt")"
  done
  BASALT_CUDA_PROFILE=1 timeout 200 $B/basalt bench -m $M --device cuda -p 512 -n 1 -r 1 \
    > "$OUT/first_${n}_profile.txt" 2>&1
  echo "== $n first pass, kernels alone (ms): $(grep -E '^T>64' "$OUT/first_${n}_profile.txt" |
    awk '{s += $(NF-2)} END {print s}')"
  grep -E "^ +512" "$OUT/first_${n}_profile.txt"
done
