# Sourced by the bench/cuda/*_session.sh scripts (one device call each): the carried build's
# runtime libraries, $OUT, `step` (runs a command with its time and exit status) and
# `gpu_tests` (the GPU suites into $OUT unless SKIP_TESTS=1; failures and skips listed).
set -u
B=build-cuda
export LD_LIBRARY_PATH=$PWD/$B/rtlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# test_cuda_model reads the golden checkpoints under the build machine's source path.
[ -d /work/main/tests/golden ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
step() { echo "== $*"; local t0=$SECONDS; "$@"; echo "== rc=$? ($((SECONDS - t0)) s)"; }
gpu_tests() {
  [ "${SKIP_TESTS:-0}" = 1 ] && return
  step $B/tests/gpu/test_cuda_kernels > "$OUT/test_cuda_kernels.txt" 2>&1
  step $B/tests/gpu/test_cuda_model > "$OUT/test_cuda_model.txt" 2>&1
  tail -n 2 "$OUT/test_cuda_kernels.txt" "$OUT/test_cuda_model.txt"
  grep -E "FAIL|SKIP" "$OUT"/test_cuda_*.txt | head -30
}
# model_dir SPEC: a synthetic checkpoint for SPEC = NAME[-nvfp4][:LAYERS] (LAYERS a depth cut for
# synth, 0 or absent: all; -nvfp4: quantised by `basalt quantize`), written under /tmp on first
# use; its path in $M.
model_dir() {
  local spec=$1 layers=0 base
  case $spec in *:*) layers=${spec#*:} spec=${spec%%:*} ;; esac
  base=${spec%-nvfp4}
  M=/tmp/$base-$layers
  [ -f $M/config.json ] || step $B/basalt synth --preset $base --layers $layers --out $M
  if [ "$spec" != "$base" ]; then
    [ -f $M-nvfp4/config.json ] || step $B/basalt quantize -m $M --to nvfp4 --out $M-nvfp4
    M=$M-nvfp4
  fi
}
