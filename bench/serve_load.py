#!/usr/bin/env python3
"""Load test for `basalt serve` (issue 4's performance figures): aggregate output tokens/s and
time to first token at several concurrency levels, and the prefix cache's effect on a repeated
long system prompt. Every request of every level gets its own prompt (a distinct first line, so
no block of it is in the prefix cache): the figures include each prompt's prefill, as a benchmark
of random prompts does. --shared-prompts gives the earlier behaviour (20 distinct prompts, the
same at every level, so later levels find them cached). Talks to a running server; Python's
standard library only (so it runs on the GPU machine too).

    build/basalt serve --port 8123 --parallel 64 &
    python3 bench/serve_load.py --url http://127.0.0.1:8123 --streams 1,8,32,64
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request


def words(n: int, seed: int) -> str:
    vocab = ["and", "the", "LORD", "said", "unto", "Moses", "behold", "land", "of", "Israel",
             "children", "went", "up", "into", "city", "came", "to", "pass", "that", "he"]
    return " ".join(vocab[(seed * 7 + i * 13 + i // 5) % len(vocab)] for i in range(n))


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def one_stream(url, model, prompt, max_tokens, out, i):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    t0 = time.perf_counter()
    ttft, n = None, 0
    with post(url + "/v1/completions", body) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("choices") and j["choices"][0].get("text") and ttft is None:
                ttft = time.perf_counter() - t0
            if j.get("usage"):
                n = j["usage"]["completion_tokens"]
    out[i] = (ttft or 0.0, n, time.perf_counter() - t0)


def level(url, model, streams, prompt_words, max_tokens, tag=None):
    out = [None] * streams

    def prompt(i):
        text = words(prompt_words, i)
        return text if tag is None else f"Request {tag}.{i}.\n" + text

    th = [threading.Thread(target=one_stream, args=(url, model, prompt(i), max_tokens, out, i))
          for i in range(streams)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    toks = sum(o[1] for o in out)
    ttfts = sorted(o[0] for o in out)
    return {"streams": streams, "output_tokens": toks, "wall_s": round(wall, 2),
            "output_tok_s": round(toks / wall, 1),
            "ttft_median_ms": round(1e3 * statistics.median(ttfts), 1),
            "ttft_max_ms": round(1e3 * ttfts[-1], 1)}


def prefix_effect(url, model, system_words):
    system = words(system_words, 99)
    res = []
    for q in ["Who went up?", "Who came down?"]:
        body = {"model": model, "max_tokens": 1, "temperature": 0,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": q}]}
        t0 = time.perf_counter()
        with post(url + "/v1/chat/completions", body) as r:
            u = json.loads(r.read())["usage"]
        res.append({"ms": round(1e3 * (time.perf_counter() - t0), 1),
                    "prompt_tokens": u["prompt_tokens"],
                    "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens")})
    return {"system_words": system_words, "first": res[0], "repeat": res[1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8123")
    ap.add_argument("--model", default=None)
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--prompt-words", type=int, default=400)
    ap.add_argument("--max-tokens", type=int, default=256)
    # ~2,000 tokens with the chat template: issue 4's repeated system prompt.
    ap.add_argument("--system-words", type=int, default=1980)
    ap.add_argument("--shared-prompts", action="store_true",
                    help="repeat the same 20 prompts at every level (the prefix cache serves "
                    "them after the first level)")
    a = ap.parse_args()
    with urllib.request.urlopen(a.url + "/v1/models") as r:
        model = a.model or json.loads(r.read())["data"][0]["id"]
    salt = time.time_ns() % 1000003  # a second run against the same server gets new prompts too
    for n, s in enumerate(int(x) for x in a.streams.split(",")):
        tag = None if a.shared_prompts else f"{salt}.{n}"
        print(json.dumps(level(a.url, model, s, a.prompt_words, a.max_tokens, tag)), flush=True)
    print(json.dumps(prefix_effect(a.url, model, a.system_words)), flush=True)


if __name__ == "__main__":
    main()
