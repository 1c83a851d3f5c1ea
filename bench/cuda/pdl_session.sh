#!/usr/bin/env bash
# One device call: programmatic dependent launch (src/backends/cuda/pdl.cuh) on and off. The GPU
# tests, then for each model in MODELS (synthetic, written on the device; NAME[-nvfp4][:LAYERS]
# as in tune_session.sh): logits of a 298-token prompt with BASALT_CUDA_PDL=1 and =0 and with
# prefill chunks 1 and 64 (all must be bitwise equal), then `basalt bench` alternating
# BASALT_CUDA_PDL=1 / =0 for ROUNDS rounds. Run from the repository root on the GPU machine with
# build-cuda/{basalt, tests/gpu/*, rtlib} carried; results in $OUT. Knobs: SKIP_TESTS=1, MODELS,
# ROUNDS (2), PROMPTS (512), GEN (64).
. "$(dirname "$0")/session_common.sh"
gpu_tests
for spec in ${MODELS:-llama-3.1-8b llama-3.1-8b-nvfp4}; do
  model_dir $spec
  n=$(basename $M)
  for pdl in on off; do
    BASALT_CUDA_PDL=$([ $pdl = on ] && echo 1 || echo 0) $B/basalt logits -m $M --device cuda \
      --tokens $LOGIT_IDS --out /tmp/l_$pdl.npy 2>/dev/null
  done
  logits_check $n $M on off
  for r in $(seq ${ROUNDS:-2}); do
    for pdl in 1 0; do
      echo "== $n pdl=$pdl round $r" >> "$OUT/bench_$n.txt"
      BASALT_CUDA_PDL=$pdl step $B/basalt bench -m $M --device cuda -p ${PROMPTS:-512} \
        -n ${GEN:-64} -r 3 --json >> "$OUT/bench_$n.txt" 2>&1
    done
  done
  grep -E "^==|^\{" "$OUT/bench_$n.txt" | cut -c1-240
done
