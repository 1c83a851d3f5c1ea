#!/usr/bin/env bash
# One device call for the prefill kernels (Block / BlockWG attention, fused launches, TMA
# tilings): the GPU suites; `bench_cuda_kernels attention` (prefill attention: Fused, Block,
# BlockWG) and `matmul` at 2,048 rows (TileTMA, TileTMA256, TileTMAP, and gate / up + SwiGLU on
# either block width; TFLOP/s); then a synthetic MODEL (default llama-3.1-8b, bf16): logits of a
# 298-token prompt bitwise across the CONFIGS (see cfg_env) and BASALT_CUDA_ATTN=block and
# prefill chunks 1 and 64, then `basalt bench` in each of CONFIGS, ROUNDS times in turn
# (default 1).
# PROFILE=1 adds the per-op table of a 2,048-token prefill with the defaults; SERVE=1 a serve
# load test.
# First, on an H200, `tune --verify --prune` on a copy of the shipped recipe (SKIP_VERIFY=1: not).
# Run from the repository root on the GPU machine with build-cuda/ from bench/cuda/pack.sh;
# results in $OUT.
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
gpu_tests
# The shipped H200 recipe re-measured against today's defaults, choices now slower set back to
# them (`tune --verify --prune`; its T > 64 entries on cp.async tilings predate TileTMA), and used
# by every later step through BASALT_RECIPE_DIR. Another device refuses it: the copy goes.
if [ "${SKIP_VERIFY:-0}" != 1 ]; then
  mkdir -p "$OUT/recipes"
  export BASALT_RECIPE_DIR=$OUT/recipes
  R=$OUT/recipes/cuda-nvidia_h200-cc9.0-sms132.json
  cp recipes/cuda-nvidia_h200-cc9.0-sms132.json "$R"
  step timeout 240 $B/basalt tune --device cuda --verify --prune -q --budget-s 180 --out "$R" \
    > "$OUT/verify.txt" 2>&1 || rm -f "$R"
  grep -E "SLOWER|pruned|entries choose|verified|for .*, not" "$OUT/verify.txt" | tail -n 30
fi
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  step timeout 120 $B/bench/cuda/bench_cuda_kernels attention > "$OUT/attention.txt" 2>&1
  grep -E "attn-pre|copy" "$OUT/attention.txt"
  # The prefill tilings at 2,048 rows: TileTMA, TileTMA256 and the persistent TileTMAP.
  BENCH_T=2048 step timeout 120 $B/bench/cuda/bench_cuda_kernels matmul > "$OUT/matmul.txt" 2>&1
  grep -E "TileTMA|mm_swiglu|copy" "$OUT/matmul.txt"
fi
model_dir ${MODEL:-llama-3.1-8b}
n=$(basename $M)
# cfg_env CFG: the environment of a configuration. auto: the defaults (fused launches, prefill
# attention on BlockWGPV, one-segment gate / up + SwiGLU on 128 + 128-column blocks); fused:
# prefill attention on Fused; nofuse: BASALT_CUDA_FUSE=0; block / blockwg / blockwgpv: those
# kernels.
cfg_env() {
  unset BASALT_CUDA_FUSE BASALT_CUDA_ATTN
  case $1 in
    nofuse) export BASALT_CUDA_FUSE=0 ;;
    fused | block | blockwg | blockwgpv) export BASALT_CUDA_ATTN=$1 ;;
  esac
}
CONFIGS=${CONFIGS:-auto fused nofuse blockwgpv}
logits() { $B/basalt logits -m $M --device cuda --tokens $LOGIT_IDS --out /tmp/l_$1.npy 2>/dev/null; }
for cfg in $CONFIGS block; do
  cfg_env $cfg
  logits $cfg
done
cfg_env auto
logits_check $n $M $(echo $CONFIGS | cut -d' ' -f1) $(echo $CONFIGS | cut -d' ' -f2-) block
for round in $(seq ${ROUNDS:-1}); do
  for cfg in $CONFIGS; do
    echo "== $n $cfg round $round" >> "$OUT/bench_$n.txt"
    cfg_env $cfg
    step $B/basalt bench -m $M --device cuda ${BENCH:--p 512,2048 -n 64 -r 3} --json \
      >> "$OUT/bench_$n.txt" 2>&1
  done
done
cfg_env auto
bench_summary "$OUT/bench_$n.txt"
if [ "${PROFILE:-0}" = 1 ]; then
  BASALT_CUDA_PROFILE=1 step $B/basalt bench -m $M --device cuda -p 2048 -n 64 -r 1 \
    > "$OUT/profile_$n.txt" 2>&1
  tail -n 40 "$OUT/profile_$n.txt"
fi
# SERVE=1 (issue 4): `basalt serve --parallel 64` under bench/serve_load.py at STREAMS (default
# 1,64,64: the first 64 records each pass shape's graph, the second is the figure).
if [ "${SERVE:-0}" = 1 ]; then
  serve_up 8123 "$OUT/serve.log"
  step python3 bench/serve_load.py --url http://127.0.0.1:8123 --streams ${STREAMS:-1,64,64} \
    --prompt-words 400 --max-tokens 256 | tee "$OUT/serve_load.jsonl"
  kill %1; wait
  grep -v "^POST" "$OUT/serve.log" | tail -n 5
fi
