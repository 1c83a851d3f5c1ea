#!/usr/bin/env bash
# One device call for issue 6 (quantised decode): GPU tests, the scaled-weight kernel benchmark,
# then a synthetic llama-3.1-8b in bf16, NVFP4 and FP8 (written by `basalt quantize` on the
# device) benchmarked end to end at context 512 (and 32K with the bf16 / fp8 KV cache). Run from
# the repository root on the GPU machine with build-cuda/{basalt, tests/gpu/*, bench/cuda/*,
# rtlib} carried; results in $OUT. Knobs: SKIP_TESTS=1, SKIP_KERNELS=1, SKIP_MODELS=1,
# FORMATS="nvfp4 fp8",
# LONG=0 (skip the 32K runs), LONG_MODELS (which get them; default bf16 and NVFP4).
. "$(dirname "$0")/session_common.sh"
gpu_tests
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  step $B/bench/cuda/bench_cuda_kernels scaled > "$OUT/bench_scaled.txt" 2>&1
  cat "$OUT/bench_scaled.txt"
fi
[ "${SKIP_MODELS:-0}" = 1 ] && exit 0
M=/tmp/llama-3.1-8b
[ -f $M/config.json ] || step $B/basalt synth --preset llama-3.1-8b --dtype bf16 --out $M
for f in ${FORMATS:-nvfp4 fp8}; do
  [ -f $M-$f/config.json ] || step $B/basalt quantize -m $M --to $f --out $M-$f
done
for m in $M $(for f in ${FORMATS:-nvfp4 fp8}; do echo $M-$f; done); do
  n=$(basename $m)
  step $B/basalt bench -m $m --device cuda -p 512,2048 -n 64 -r 3 --json > "$OUT/bench_$n.txt" 2>&1
  grep -v "^\[" "$OUT/bench_$n.txt" | tail -n 4
  case " ${LONG_MODELS:-llama-3.1-8b llama-3.1-8b-nvfp4} " in *" $n "*) long=1 ;; *) long=0 ;; esac
  if [ "${LONG:-1}" = 1 ] && [ $long = 1 ]; then
    for kv in bf16 fp8; do
      step $B/basalt bench -m $m --device cuda -p 32768 -n 32 -r 1 --kv-cache-dtype $kv --json \
        > "$OUT/bench_${n}_32k_$kv.txt" 2>&1
      grep -v "^\[" "$OUT/bench_${n}_32k_$kv.txt" | tail -n 3
    done
  fi
done
