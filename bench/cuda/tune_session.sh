#!/usr/bin/env bash
# One device call for issue 7 (recipes): the GPU tests, then for each model in MODELS (synthetic,
# written on the device; NAME or NAME-nvfp4, quantised by `basalt quantize`): `basalt tune` into
# $OUT/recipes (one merged recipe for the device), then `basalt bench` tuned and --no-autotune.
# Run from the repository root on the GPU machine with build-cuda/{basalt, tests/gpu/*, rtlib}
# carried; results in $OUT. Knobs: SKIP_TESTS=1, MODELS="llama-3.1-8b llama-3.1-8b-nvfp4"
# (NAME[-nvfp4][:LAYERS], LAYERS a depth cut for synth, 0 or absent: all), BUDGET (tune seconds
# per model), PROMPTS, RECIPE_IN (a recipe to merge into, e.g. recipes/*.json from an earlier
# call), SKIP_TUNE=1, SKIP_BENCH=1, EXACT=1 (logits bitwise across prefill chunkings under the
# recipe in force), MISSING=1 (`tune --only-missing`: only the shapes the recipe lacks), START=1
# (serve start-up to /health with the recipe and with --no-autotune, 3 each; tokenizer files from
# $B/tok), PROFILE64=1 (per-op times of 64-row passes, BASALT_CUDA_PROFILE).
. "$(dirname "$0")/session_common.sh"
mkdir -p "$OUT/recipes"
export BASALT_RECIPE_DIR=$OUT/recipes
# What an entry point would run before this call tunes anything (the shipped recipe, if any).
$B/basalt info --recipes --device cuda > "$OUT/info.txt" 2>&1
grep "^recipe:" "$OUT/info.txt"
# tune merges into RECIPE_IN's copy whatever its file name (else into the device's default file).
TUNE_OUT=()
if [ -n "${RECIPE_IN:-}" ]; then
  cp "$RECIPE_IN" "$OUT/recipes/"
  TUNE_OUT=(--out "$OUT/recipes/$(basename "$RECIPE_IN")")
fi
gpu_tests
for spec in ${MODELS:-llama-3.1-8b llama-3.1-8b-nvfp4}; do
  model_dir $spec
  n=$(basename $M)
  # (Few files: the device returns at most 8 from $OUT.)
  if [ "${SKIP_TUNE:-0}" != 1 ]; then
    step $B/basalt tune -m $M --device cuda --budget-s ${BUDGET:-120} -q "${TUNE_OUT[@]}" \
      $([ "${MISSING:-0}" = 1 ] && echo --only-missing) >> "$OUT/tune.txt" 2>&1
    tail -n 3 "$OUT/tune.txt"
  fi
  if [ "${EXACT:-0}" = 1 ]; then  # the recipe in force keeps the contract on this model's shapes
    ids=$(seq -s, 1000 37 12000)  # 298 tokens
    for c in 0 1 7 64; do
      $B/basalt -v logits -m $M --device cuda --tokens $ids --prefill-chunk $c --out /tmp/l_$c.npy \
        2> /tmp/l_$c.err || tail -n 2 /tmp/l_$c.err
    done
    grep -h "recipe" /tmp/l_0.err | head -n 1
    for c in 1 7 64; do
      cmp -s /tmp/l_0.npy /tmp/l_$c.npy && echo "EXACT chunk $c == whole prompt, bitwise" ||
        echo "DIFFER chunk $c vs whole prompt"
    done
    $B/basalt logits -m $M --device cuda --tokens $ids --no-autotune --out /tmp/l_d.npy 2>/dev/null
    cmp -s /tmp/l_0.npy /tmp/l_d.npy && echo "recipe == --no-autotune, bitwise" ||
      echo "recipe != --no-autotune (a re-split weight shape: another fixed order)"
  fi
  if [ "${START:-0}" = 1 ]; then  # serve start-up: does the recipe add time?
    cp $B/tok/* $M/ 2>/dev/null
    for i in 1 2 3; do
      for flag in "" --no-autotune; do
        t0=$(date +%s.%N)
        $B/basalt serve -m $M --device cuda --port 8125 --max-context 4096 $flag \
          > /tmp/start.log 2>&1 &
        for j in $(seq 300); do
          python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8125/health')" \
            2> /dev/null && break
          sleep 0.1
        done
        echo "$n serve start-up ${flag:-recipe}: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
        grep -m1 "recipe" /tmp/start.log
        kill %1; wait
        cp /tmp/start.log "$OUT/start_last.log"
      done
    done | tee -a "$OUT/start.txt"
  fi
  if [ "${PROFILE64:-0}" = 1 ]; then  # per-op times of 64-row passes (issue 4's serving batches)
    BASALT_CUDA_PROFILE=1 $B/basalt bench -m $M --device cuda -p 512 -n 8 -r 1 \
      --verify-rows 64 > "$OUT/profile64_$n.txt" 2>&1
    tail -n 40 "$OUT/profile64_$n.txt"
  fi
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
