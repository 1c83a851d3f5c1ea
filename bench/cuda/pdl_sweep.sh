#!/usr/bin/env bash
# One device call: decode with each class of small kernels launched with PDL or not
# (BASALT_CUDA_PDL_SMALL masks, pdl.cuh), against the old build (build-cuda/old/basalt, from
# pack.sh OLD=DIR), ROUNDS rounds alternating, per model in MODELS (model_dir specs). MASKS:
# the masks to try (default "0 1 2 3 15"). Results in $OUT/sweep_NAME.txt; one summary line each.
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
for spec in ${MODELS:-llama-3.1-8b}; do
  model_dir $spec
  n=$(basename $M)
  for r in $(seq ${ROUNDS:-2}); do
    for cfg in old ${MASKS:-0 1 2 3 15}; do
      bin=$B/basalt
      [ $cfg = old ] && bin=$B/old/basalt
      line=$(BASALT_CUDA_PDL_SMALL=$([ $cfg = old ] && echo 0 || echo $cfg) $bin bench -m $M \
        --device cuda -p 512 -n 64 -r 3 --json 2> /dev/null | grep decode_tok_s | head -1)
      echo "$n $cfg round $r $line" >> "$OUT/sweep_$n.txt"
      echo "$line" | python3 -c "
import json, sys
r = json.loads(sys.stdin.read())
print('$n %-4s round $r: decode %.1f tok/s (bw %.3f), prefill %.0f' % ('$cfg', r['decode_tok_s'], r['bandwidth_fraction'], r['prefill_tok_s']))"
    done
  done
done
