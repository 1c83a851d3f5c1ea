#!/usr/bin/env bash
# One device call for issue 7 (recipes): the GPU tests, then for each model in MODELS (synthetic,
# written on the device; NAME or NAME-nvfp4, quantised by `basalt quantize`): `basalt tune` into
# $OUT/recipes (one merged recipe for the device), then `basalt bench` tuned and --no-autotune.
# Run from the repository root on the GPU machine with build-cuda/{basalt, tests/gpu/*, rtlib}
# carried; results in $OUT. Knobs: SKIP_TESTS=1, MODELS="llama-3.1-8b llama-3.1-8b-nvfp4"
# (NAME[-nvfp4][:LAYERS], LAYERS a depth cut for synth, 0 or absent: all), BUDGET (tune seconds
# per model), PROMPTS, RECIPE_IN (a recipe to merge into, e.g. recipes/*.json from an earlier
# call), SKIP_BENCH=1.
set -u
B=build-cuda
export LD_LIBRARY_PATH=$PWD/$B/rtlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/recipes"
export BASALT_RECIPE_DIR=$OUT/recipes
# What an entry point would run before this call tunes anything (the shipped recipe, if any).
$B/basalt info --recipes --device cuda > "$OUT/info.txt" 2>&1
grep "^recipe:" "$OUT/info.txt"
[ -n "${RECIPE_IN:-}" ] && cp "$RECIPE_IN" "$OUT/recipes/"
step() { echo "== $*"; local t0=$SECONDS; "$@"; echo "== rc=$? ($((SECONDS - t0)) s)"; }
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  step $B/tests/gpu/test_cuda_kernels > "$OUT/test_cuda_kernels.txt" 2>&1
  step $B/tests/gpu/test_cuda_model > "$OUT/test_cuda_model.txt" 2>&1
  tail -n 2 "$OUT/test_cuda_kernels.txt" "$OUT/test_cuda_model.txt"
  grep FAIL "$OUT"/test_cuda_*.txt | head -30
fi
for spec in ${MODELS:-llama-3.1-8b llama-3.1-8b-nvfp4}; do
  layers=0
  case $spec in *:*) layers=${spec#*:} spec=${spec%%:*} ;; esac
  base=${spec%-nvfp4}
  M=/tmp/$base-$layers
  [ -f $M/config.json ] || step $B/basalt synth --preset $base --layers $layers --out $M
  if [ "$spec" != "$base" ]; then
    [ -f $M-nvfp4/config.json ] || step $B/basalt quantize -m $M --to nvfp4 --out $M-nvfp4
    M=$M-nvfp4
  fi
  n=$(basename $M)
  # (Few files: the device returns at most 8 from $OUT.)
  step $B/basalt tune -m $M --device cuda --budget-s ${BUDGET:-120} -q >> "$OUT/tune.txt" 2>&1
  tail -n 3 "$OUT/tune.txt"
  [ "${SKIP_BENCH:-0}" = 1 ] && continue
  for mode in tuned default; do
    flag=""
    [ $mode = default ] && flag=--no-autotune
    echo "== $n $mode" >> "$OUT/bench_$n.txt"
    step $B/basalt bench -m $M --device cuda -p ${PROMPTS:-512,2048} -n 64 -r 3 --json $flag \
      >> "$OUT/bench_$n.txt" 2>&1
  done
  grep "^{" "$OUT/bench_$n.txt" | cut -c1-200
done
