# Sourced by the bench/cuda/*_session.sh scripts (one device call each): the carried build's
# runtime libraries, $OUT, `step` (runs a command with its time and exit status) and
# `gpu_tests` (the GPU suites into $OUT unless SKIP_TESTS=1; failures and skips listed).
set -u
B=build-cuda
export LD_LIBRARY_PATH=$PWD/$B/rtlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# test_cuda_model reads the golden checkpoints under the build machine's source path (pack.sh
# records it; older archives: /work/main).
SRC_DIR=$(cat $B/source_dir 2>/dev/null || echo /work/main)
[ -d "$SRC_DIR/tests/golden" ] || { mkdir -p "$(dirname "$SRC_DIR")" && ln -sfn "$PWD" "$SRC_DIR"; }
step() { echo "== $*"; local t0=$SECONDS; "$@"; echo "== rc=$? ($((SECONDS - t0)) s)"; }
# Each suite is cut off after TEST_TIMEOUT seconds (default 240), so a kernel that hangs (an
# mbarrier pipeline waiting forever) costs minutes, not the whole call.
gpu_tests() {
  [ "${SKIP_TESTS:-0}" = 1 ] && return
  step timeout ${TEST_TIMEOUT:-240} $B/tests/gpu/test_cuda_kernels > "$OUT/test_cuda_kernels.txt" 2>&1
  step timeout ${TEST_TIMEOUT:-240} $B/tests/gpu/test_cuda_model > "$OUT/test_cuda_model.txt" 2>&1
  tail -n 2 "$OUT/test_cuda_kernels.txt" "$OUT/test_cuda_model.txt"
  grep -E "FAIL|SKIP" "$OUT"/test_cuda_*.txt | head -30
}
# model_dir SPEC: a synthetic checkpoint for SPEC = NAME[-nvfp4|-fp8][:LAYERS] (LAYERS a depth
# cut for synth, 0 or absent: all; -nvfp4 / -fp8: quantised by `basalt quantize`), written under
# /tmp on first use; its path in $M.
model_dir() {
  local spec=$1 layers=0 base q
  case $spec in *:*) layers=${spec#*:} spec=${spec%%:*} ;; esac
  base=${spec%-nvfp4}
  base=${base%-fp8}
  M=/tmp/$base-$layers
  [ -f $M/config.json ] || step $B/basalt synth --preset $base --layers $layers --out $M
  if [ "$spec" != "$base" ]; then
    q=${spec#$base-}
    [ -f $M-$q/config.json ] || step $B/basalt quantize -m $M --to $q --out $M-$q
    M=$M-$q
  fi
}
# logits_check NAME MODEL REF OTHER...: the logits of a 298-token prompt ($LOGIT_IDS) in
# /tmp/l_REF.npy and each /tmp/l_OTHER.npy (written by the caller), and of $B/basalt with
# prefill chunks 1 and 64, compared with REF bitwise: one EXACT / DIFFER line each.
LOGIT_IDS=$(seq -s, 1000 37 12000)
logits_check() {
  local n=$1 m=$2 ref=$3 c x
  shift 3
  for c in 1 64; do
    $B/basalt logits -m $m --device cuda --tokens $LOGIT_IDS --prefill-chunk $c \
      --out /tmp/l_$c.npy 2>/dev/null
  done
  for x in "$@" 1 64; do
    cmp -s /tmp/l_$ref.npy /tmp/l_$x.npy && echo "$n EXACT $ref == $x, bitwise" ||
      echo "$n DIFFER $ref vs $x"
  done
}
# serve_up PORT LOG: `basalt serve -m $M --parallel 64 --max-context 4096` on PORT in the
# background (its output in LOG; the caller kills %1), back once /health answers (120 s at most);
# $SERVE_ARGS, when set, are added to its options.
# Llama 3's tokenizer files go into $M first.
serve_up() {
  cp $B/tok/* $M/
  $B/basalt serve -m $M --device cuda --port $1 --parallel 64 --max-context 4096 ${SERVE_ARGS:-} \
    > "$2" 2>&1 &
  for i in $(seq 120); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/health')" \
      2> /dev/null && break
    sleep 1
  done
}
# bench_summary FILE: the "== ..." headers of FILE and a line for each `basalt bench --json`
# record in it (prefill, matmul fraction, decode, context, bandwidth fraction).
bench_summary() {
  grep -E "^==|prefill_tok_s" "$1" |
    python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("=="):
        print(line.strip()); continue
    try: r = json.loads(line)
    except ValueError: continue
    print("  p=%s prefill %.0f tok/s (matmul %.3f)  decode %.1f tok/s at %s (bw %.3f)" % (
        r.get("prompt_tokens"), r["prefill_tok_s"], r.get("matmul_fraction", 0), r["decode_tok_s"],
        r["context"], r.get("bandwidth_fraction", 0)))'
}
