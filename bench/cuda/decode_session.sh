#!/usr/bin/env bash
# One device call for the decode step (issue 3): the GPU suites; then a synthetic MODEL (default
# llama-3.1-8b, bf16): `basalt bench` exact and with --fast-prefill (the exactness cost), the
# per-op table of decode (BASALT_CUDA_PROFILE=1: graphs off, events around each op), and the
# kernels of decode steps as the graph runs them, timed one by one by ncu (NCU=0: not): their
# sum against the step's time is what launches and gaps cost. SERVE=1 adds serve_load.py at
# 1 / 64 / 64 streams.
# Run from the repository root on the GPU machine with build-cuda/ from bench/cuda/pack.sh;
# results in $OUT.
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
gpu_tests
model_dir ${MODEL:-llama-3.1-8b}
n=$(basename $M)
for mode in exact fast; do
  extra=
  [ $mode = fast ] && extra=--fast-prefill
  echo "== $n $mode" >> "$OUT/bench_$n.txt"
  step $B/basalt bench -m $M --device cuda ${BENCH:--p 512,2048 -n 64 -r 3} $extra --json \
    >> "$OUT/bench_$n.txt" 2>&1
done
bench_summary "$OUT/bench_$n.txt"
BASALT_CUDA_PROFILE=1 step $B/basalt bench -m $M --device cuda -p 512 -n 32 -r 1 \
  > "$OUT/profile_decode_$n.txt" 2>&1
tail -n 30 "$OUT/profile_decode_$n.txt"
if [ "${NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
  # A 64-token prompt, then decode steps: skip the prefill and the first steps' kernels.
  step timeout 240 ncu --clock-control none --cache-control none --graph-profiling node \
    --metrics gpu__time_duration.sum --csv -s ${NCU_SKIP:-1500} -c ${NCU_COUNT:-600} \
    $B/basalt bench -m $M --device cuda -p 64 -n 24 -r 1 > "$OUT/ncu_decode_$n.csv" 2>&1
  python3 - "$OUT/ncu_decode_$n.csv" << 'EOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit(print("ncu: no rows"))
h = rows[0]
ki, vi = h.index("Kernel Name"), h.index("Metric Value")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    k = r[ki].split("(")[0][:70]; tot[k] += v; cnt[k] += 1
s = sum(tot.values())
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print("%8.1f us  %5d calls  %6.2f us/call  %s" % (v / 1e3, cnt[k], v / 1e3 / cnt[k], k))
print("sum %.1f us over %d kernels" % (s / 1e3, sum(cnt.values())))
EOF
fi
if [ "${SERVE:-0}" = 1 ]; then
  serve_up 8123 "$OUT/serve.log"
  step python3 bench/serve_load.py --url http://127.0.0.1:8123 --streams ${STREAMS:-1,64,64} \
    --prompt-words 400 --max-tokens 256 | tee "$OUT/serve_load.jsonl"
  kill %1; wait
fi
