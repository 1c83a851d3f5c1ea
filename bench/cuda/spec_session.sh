#!/usr/bin/env bash
# One device call for issue 8's H200 figures: the verification-pass cost per k (T = k + 1 rows)
# of synthetic llama-3.1-8b, qwen3-8b and qwen3-0.6b (`bench --verify-rows`: what a drafter that
# is right every time would give, the "≥ 2× where the draft is right" target), and the default
# model with its trained drafters (ngram, draft:models/draft, dspark:models/dspark). Run
# from the repository root on the GPU machine with build-cuda/{basalt, tests/gpu/*, rtlib}
# carried; results in $OUT. Knobs: SKIP_TESTS=1, MODELS="llama-3.1-8b qwen3-8b qwen3-0.6b".
. "$(dirname "$0")/session_common.sh"
gpu_tests
for name in ${MODELS:-llama-3.1-8b qwen3-8b qwen3-0.6b}; do
  model_dir $name
  step $B/basalt bench -m $M --device cuda -p 512 -n 64 -r 3 --json --verify-rows 2,3,5,9,17 \
    > "$OUT/verify_$name.txt" 2>&1
  grep -E "^\{" "$OUT/verify_$name.txt" | grep -oE '"(decode_tok_s|verify_[a-z_]+)":[^a-z]*'
done
for s in "" "--spec ngram" "--spec draft:models/draft" "--spec dspark:models/dspark"; do
  n=$(echo "plain $s" | tr -c 'a-z0-9\n' _)
  step $B/basalt bench --device cuda -p 32 -n 256 -r 5 --json $s > "$OUT/default_$n.txt" 2>&1
  grep -E "^speculative" "$OUT/default_$n.txt"
  grep -E "^\{" "$OUT/default_$n.txt" | grep -oE '"decode_tok_s":[0-9.]*'
done
