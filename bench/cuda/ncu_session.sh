#!/usr/bin/env bash
# One device call: ncu's full sections (and, for the first kernel, per-instruction SASS with
# stall samples) of decode kernels. KERNELS: "SPEC:REGEX:SKIP" items, each the first kernel
# matching REGEX after SKIP launches of it in `basalt bench -p PROMPT -n 8 -r 1` (PROMPT default 512) on the synthetic
# model SPEC (model_dir's specs; a depth cut is enough). Results in $OUT/ncu_*.txt.
. "$(dirname "$0")/session_common.sh"
i=0
for item in ${KERNELS:-llama-3.1-8b:4:attn_mma_split:8 llama-3.1-8b:4:attn_split_merge:8}; do
  spec=${item%%:*} rest=${item#*:}
  layers=${rest%%:*} rest=${rest#*:}
  re=${rest%%:*} skip=${rest#*:}
  model_dir $spec:$layers
  i=$((i + 1))
  step timeout 150 ncu --clock-control none --set full -k regex:$re -s $skip -c 1 -o /tmp/rep$i \
    $B/basalt bench -m $M --device cuda -p ${PROMPT:-512} -n 8 -r 1 > "$OUT/ncu_run_$i.txt" 2>&1
  ncu -i /tmp/rep$i.ncu-rep --page details > "$OUT/ncu_$i-$re.txt" 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Block Limit|Dynamic Shared|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Ipc|Grid Size|Block Size" \
    "$OUT/ncu_$i-$re.txt" | head -30
  if [ $i = 1 ] || [ "${SOURCE:-0}" = 1 ]; then
    ncu -i /tmp/rep$i.ncu-rep --page source --print-source sass --csv > "$OUT/ncu_src_$i.csv" 2>&1
    head -c 300 "$OUT/ncu_src_$i.csv"; echo
  fi
done
