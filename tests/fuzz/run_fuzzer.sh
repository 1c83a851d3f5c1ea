#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time over a fresh corpus (ctest -L fuzz does this).
#   run_fuzzer.sh FUZZER SECONDS WORKDIR DICT SEED...
# The corpus (WORKDIR/corpus) is rebuilt from the seeds on every run: each seed as is, plus
# its first 4 KiB and 8 KiB when longer (truncated headers, tensor data cut short), so nothing
# large is committed. Crashing inputs land in WORKDIR/artifacts/; replay one with
# `FUZZER WORKDIR/artifacts/crash-...`. Extra libFuzzer flags: $BASALT_FUZZ_ARGS.
set -euo pipefail
fuzzer=$1 seconds=$2 work=$3 dict=$4
shift 4
rm -rf "$work/corpus"
mkdir -p "$work/corpus" "$work/artifacts"
i=0
for seed in "$@"; do
  i=$((i + 1))
  base="$work/corpus/$(printf %02d $i)-$(basename "$(dirname "$seed")")-$(basename "$seed")"
  cp "$seed" "$base"
  size=$(stat -c %s "$seed")
  for cut in 4096 8192; do
    if ((size > cut)); then head -c "$cut" "$seed" >"$base.cut$cut"; fi
  done
done
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# -timeout: seconds per input (a hang is a finding); -rss_limit_mb bounds memory per process.
# shellcheck disable=SC2086  # BASALT_FUZZ_ARGS is a list of flags
exec "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -dict="$dict" \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 ${BASALT_FUZZ_ARGS:-} "$work/corpus"
