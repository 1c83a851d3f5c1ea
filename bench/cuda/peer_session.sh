#!/usr/bin/env bash
# One device call: basalt against a peer engine in the same run (docs: "a ratio against a peer
# measured in the same run"). Carry build-cuda with build-cuda/peer/llama-bench (pack.sh PEER=...:
# llama.cpp's llama-bench, CUDA, sm_90a). Per model spec in MODELS (default llama-3.1-8b): the
# same shapes as a GGUF (`basalt synth --format gguf`, DTYPES: bf16 and/or llama.cpp's q4_k_m /
# q8_0; basalt reads the GGUF too); then, ROUNDS times in turn, `llama-bench -fa 1 -ngl 99` (pp
# PROMPT and tg GEN at depths 0 and 512, then tg 32 at depth DEPTH) and `basalt bench` on the
# same GGUF (-p 512,PROMPT -n GEN: decode at contexts 512 + GEN and PROMPT + GEN; then -p DEPTH
# -n 32). Results in $OUT.
. "$(dirname "$0")/session_common.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
LB=$B/peer/llama-bench
[ -x $LB ] || { echo "no $LB: pack with PEER=.../llama-bench"; exit 1; }
# llama-bench links libcudart, libcublas and libnccl dynamically: the device has them in
# PyTorch's nvidia-* wheels.
NV=$(python3 -c 'import glob, os, nvidia
print(":".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2> /dev/null)
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH${NV:+:$NV}
ldd $LB | grep "not found" && echo "llama-bench: libraries missing (above)"
P=${PROMPT:-2048} N=${GEN:-128} D=${DEPTH:-32768}
for spec in ${MODELS:-llama-3.1-8b}; do
  for dt in ${DTYPES:-bf16}; do
    g=/tmp/$spec-$dt.gguf
    [ -f $g ] || step $B/basalt synth --preset $spec --format gguf --dtype $dt --out $g
    for r in $(seq ${ROUNDS:-2}); do
      echo "== $spec $dt round $r" | tee -a "$OUT/peer.txt"
      lj=$OUT/llama_$spec-$dt-$r.json
      timeout 600 $LB -m $g -ngl 99 -fa 1 -p $P -n $N -d 0,512 -r 3 -o json > $lj 2> ${lj%.json}.err
      timeout 600 $LB -m $g -ngl 99 -fa 1 -p 0 -n 32 -d $D -r 1 -o json > ${lj%.json}-depth.json \
        2>> ${lj%.json}.err
      step $B/basalt bench -m $g --device cuda -p 512,$P -n $N -r 3 --json >> "$OUT/peer.txt" 2>&1
      step $B/basalt bench -m $g --device cuda -p $D -n 32 -r 1 --json >> "$OUT/peer.txt" 2>&1
      python3 - $lj ${lj%.json}-depth.json << 'PY' | tee -a "$OUT/peer.txt"
import json, sys
for f in sys.argv[1:]:
    try:
        s = open(f).read()
        rows = json.loads(s[s.index("["):s.rindex("]") + 1])
    except (OSError, ValueError) as e:
        print("llama-bench:", f, e)
        continue
    for r in rows:
        print("llama.cpp pp%d tg%d depth %d: %.1f tok/s (samples %s)" % (r["n_prompt"],
              r["n_gen"], r.get("n_depth", 0), r["avg_ts"],
              ", ".join("%.1f" % x for x in r.get("samples_ts", []))))
PY
    done
  done
done
