#!/usr/bin/env bash
# One device call: this build against an older one, same machine, same call. Carry
# build-cuda/{basalt, tests/gpu/*, bench/cuda/*, rtlib} (this build) and build-cuda/old/{basalt,
# bench_cuda_kernels} (the build to compare with, copied before the change). The GPU tests, then
# `bench_cuda_kernels scaled` at BENCH_T (default 1) old / new alternating for KROUNDS rounds, then
# per model (MODELS: synthetic, written on the device, quantised by `basalt quantize` for
# -nvfp4 / -fp8): logits of a 298-token prompt from both builds and with prefill chunks 1
# and 64 (all must be bitwise equal), and `basalt bench -p 512 -n 64 -r 3` alternating old / new
# for ROUNDS rounds. Results in $OUT. Knobs: SKIP_TESTS=1, SKIP_KERNELS=1, MODELS (specs as
# model_dir's: NAME[-nvfp4|-fp8][:LAYERS]), ROUNDS (2), KROUNDS (2), BENCH_T, PROMPTS (512), GEN
# (64), BENCH_ARGS (more `basalt bench` flags, e.g. --no-autotune).
. "$(dirname "$0")/session_common.sh"
O=$B/old
gpu_tests
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  export BENCH_T=${BENCH_T:-1}
  for r in $(seq ${KROUNDS:-2}); do
    for v in old new; do
      bin=$B/bench/cuda/bench_cuda_kernels
      [ $v = old ] && bin=$O/bench_cuda_kernels
      echo "== kernels $v round $r" >> "$OUT/kernels.txt"
      $bin scaled >> "$OUT/kernels.txt" 2>&1
    done
  done
  grep -E "^==|fused|bf16 " "$OUT/kernels.txt" | cut -c1-110
fi
for spec in ${MODELS-llama-3.1-8b-nvfp4 llama-3.1-8b-fp8}; do
  model_dir $spec
  n=$(basename $M)
  $O/basalt logits -m $M --device cuda --tokens $LOGIT_IDS --out /tmp/l_old.npy 2>/dev/null
  $B/basalt logits -m $M --device cuda --tokens $LOGIT_IDS --out /tmp/l_new.npy 2>/dev/null
  logits_check $n $M new old
  for r in $(seq ${ROUNDS:-2}); do
    for v in old new; do
      bin=$B/basalt
      [ $v = old ] && bin=$O/basalt
      echo "== $n $v round $r" >> "$OUT/bench_$n.txt"
      step $bin bench -m $M --device cuda -p ${PROMPTS:-512} -n ${GEN:-64} -r 3 --json ${BENCH_ARGS:-} \
        >> "$OUT/bench_$n.txt" 2>&1
    done
  done
  grep -E "^==|^\{" "$OUT/bench_$n.txt" | grep -v "rc=" | cut -c1-260
done
