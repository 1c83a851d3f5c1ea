#!/usr/bin/env python3
"""basalt vs llama.cpp on the CPU, side by side on the same GGUF files (issue 9).

Runs `basalt bench` and llama.cpp's `llama-bench` alternately, ROUNDS times per model, with the
same thread count, prompt length and decode length (llama-bench's decode at a KV depth of the
prompt length, where basalt's runs), and prints prefill and decode tokens/s for
both plus the per-round ratio basalt / llama.cpp as min / median / max. Each tool reports the
median (basalt) or mean (llama-bench) of its own REPEATS runs per round. llama.cpp is not part
of basalt: build llama-bench yourself (bench/RESULTS.md, "CPU vs llama.cpp", says how) and pass
its path.

  python3 bench/cpu_side_by_side.py --basalt build/basalt --llama-bench /path/to/llama-bench \
      -m a.gguf -m b.gguf [--threads 2] [-p 128] [-n 32] [--rounds 5] [--repeats 3] [--json out]
"""
import argparse
import json
import statistics
import subprocess
import sys


def run_basalt(args, model):
    cmd = [args.basalt, "bench", "-m", model, "--device", "cpu", "-t", str(args.threads),
           "-p", str(args.p), "-n", str(args.n), "-r", str(args.repeats), "--json"]
    cmd += args.basalt_arg
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    return row["prefill_tok_s"], row["decode_tok_s"]


def run_llama(args, model):
    # basalt bench decodes right after its P-token prompt, so its decode attends to P .. P+N
    # positions; llama-bench's tg test starts from an empty cache unless given a depth. Two
    # runs: the prompt at depth 0, the decode at depth P (both as basalt measures them).
    base = [args.llama_bench, "-m", model, "-t", str(args.threads), "-r", str(args.repeats),
            "-o", "json"]
    pp = tg = None
    for extra in (["-p", str(args.p), "-n", "0"], ["-p", "0", "-n", str(args.n), "-d", str(args.p)]):
        out = subprocess.run(base + extra, capture_output=True, text=True, check=True).stdout
        for t in json.loads(out):
            if t["n_prompt"] > 0 and t["n_gen"] == 0 and t.get("n_depth", 0) == 0:
                pp = t["avg_ts"]
            elif t["n_gen"] > 0 and t["n_prompt"] == 0 and t.get("n_depth") == args.p:
                tg = t["avg_ts"]
    if pp is None or tg is None:
        sys.exit(f"llama-bench gave no pp{args.p} or tg{args.n} @ d{args.p} result (too old a "
                 "llama-bench for -d, the KV depth?)")
    return pp, tg


def spread(v):
    return min(v), statistics.median(v), max(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--basalt", required=True)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--basalt-arg", action="append", default=[],
                    help="extra argument for basalt bench (repeatable)")
    ap.add_argument("--json", help="write every measurement here")
    args = ap.parse_args()

    results = []
    for model in args.model:
        rounds = []
        for r in range(args.rounds):
            first_basalt = r % 2 == 0  # alternate who runs first
            if first_basalt:
                b = run_basalt(args, model)
                l = run_llama(args, model)
            else:
                l = run_llama(args, model)
                b = run_basalt(args, model)
            rounds.append({"basalt_pp": b[0], "basalt_tg": b[1], "llama_pp": l[0], "llama_tg": l[1]})
            print(f"{model} round {r + 1}: basalt pp {b[0]:.1f} tg {b[1]:.2f} | "
                  f"llama.cpp pp {l[0]:.1f} tg {l[1]:.2f}", file=sys.stderr, flush=True)
        results.append({"model": model, "rounds": rounds})

    print(f"threads {args.threads}, pp{args.p}, tg{args.n} at depth {args.p}, {args.rounds} rounds of "
          f"{args.repeats} runs each; ratio = basalt / llama.cpp per round (min / median / max)\n")
    print("| model | basalt pp tok/s | llama.cpp pp tok/s | pp ratio | basalt tg tok/s | "
          "llama.cpp tg tok/s | tg ratio |")
    print("|---|---:|---:|---|---:|---:|---|")
    for res in results:
        rs = res["rounds"]
        med = lambda k: statistics.median(x[k] for x in rs)
        ppr = spread([x["basalt_pp"] / x["llama_pp"] for x in rs])
        tgr = spread([x["basalt_tg"] / x["llama_tg"] for x in rs])
        print(f"| {res['model'].rsplit('/', 1)[-1]} | {med('basalt_pp'):.1f} | {med('llama_pp'):.1f} | "
              f"{ppr[0]:.2f} / **{ppr[1]:.2f}** / {ppr[2]:.2f} | {med('basalt_tg'):.2f} | "
              f"{med('llama_tg'):.2f} | {tgr[0]:.2f} / **{tgr[1]:.2f}** / {tgr[2]:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
