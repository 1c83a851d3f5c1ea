"""Client disconnects, concurrency (exactness under batching), shutdown, `basalt env`."""
import json
import os
import re
import signal
import subprocess
import threading
import time

import httpx
import openai
import pytest

from conftest import MODEL, REPO, Server, basalt_bin

# The issue asks for 64 simultaneous streams; 64 finishes well within a minute on the
# 2-core CI machine with the embedded model.
CONCURRENT_STREAMS = 64


def wait_for(cond, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_client_disconnect_cancels(server):
    before = server.metrics()
    cancelled0 = before.get('basalt_generations_total{reason="cancelled"}', 0)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "In the beginning"}],
            "max_tokens": 1000, "temperature": 0, "stream": True}
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", server.url + "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            got = [next(lines) for _ in range(6)]
            assert any(l.startswith("data: ") for l in got)
        # leaving the block closes the connection mid-stream
    assert wait_for(lambda: server.metrics().get(
        'basalt_generations_total{reason="cancelled"}', 0) == cancelled0 + 1), server.log()
    m = server.metrics()
    assert m["basalt_generations_active"] == 0
    assert server.alive()


def test_engine_running_gauge_after_cancel(server):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "In the beginning"}],
            "max_tokens": 1000, "temperature": 0, "stream": True}
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", server.url + "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            [next(lines) for _ in range(6)]
    assert wait_for(lambda: server.metrics()["basalt_requests_running"] == 0, timeout=5)


def stream_chat(url, i, out):
    body = {"model": MODEL, "max_tokens": 24, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"Verse {i}: and the"}]}
    text, usage = [], None
    with httpx.Client(timeout=120) as c:
        with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                j = json.loads(line[6:])
                if j["choices"]:
                    text.append(j["choices"][0]["delta"].get("content") or "")
                if j.get("usage"):
                    usage = j["usage"]["completion_tokens"]
    out[i] = ("".join(text), usage)


def test_concurrent_streams_match_solo_runs(server):
    solo = {}
    for i in range(CONCURRENT_STREAMS):
        stream_chat(server.url, i, solo)
    together = {}
    t0 = time.time()
    threads = [threading.Thread(target=stream_chat, args=(server.url, i, together))
               for i in range(CONCURRENT_STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    elapsed = time.time() - t0
    assert len(together) == CONCURRENT_STREAMS
    for i in range(CONCURRENT_STREAMS):
        assert together[i] == solo[i], (i, together[i], solo[i])
    assert elapsed < 60, f"{CONCURRENT_STREAMS} streams took {elapsed:.1f} s"


def test_sigterm_shuts_down_gracefully():
    s = Server()
    # a stream in flight when the signal comes ends, and the process exits 0
    done = {}

    def run():
        try:
            with httpx.Client(timeout=30) as c:
                with c.stream("POST", s.url + "/v1/completions",
                              json={"prompt": "And", "max_tokens": 1000, "temperature": 0,
                                    "stream": True}) as r:
                    for _ in r.iter_lines():
                        pass
            done["ok"] = True
        except httpx.HTTPError as e:
            done["err"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(20) == 0, s.log()
    t.join(20)
    assert "shutting down" in s.log()


def test_connection_burst_is_queued_not_dropped():
    """64 clients connecting at once while the accept loop cannot run (the process stopped):
    the kernel completes every handshake into the listen queue (cpp-httplib's own backlog of
    5 would hold 6 and drop the rest), and each connection is served once the server runs."""
    import select
    import socket
    s = Server()
    socks = []
    try:
        s.proc.send_signal(signal.SIGSTOP)
        for _ in range(CONCURRENT_STREAMS):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", s.port))
            socks.append(c)
        pending, deadline = set(socks), time.time() + 2
        while pending and time.time() < deadline:
            _, ready, _ = select.select([], list(pending), [], 0.2)
            pending -= set(ready)
        connected = [c for c in socks
                     if c not in pending and c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0]
        assert len(connected) == CONCURRENT_STREAMS
    finally:
        s.proc.send_signal(signal.SIGCONT)
    for c in socks:
        c.setblocking(True)
        c.settimeout(30)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    for c in socks:
        assert c.recv(64).startswith(b"HTTP/1.1 200")
        c.close()
    s.stop()
    assert s.proc.returncode == 0, s.log()


def test_env_and_run(server):
    out = subprocess.run([str(basalt_bin()), "env", "--url", server.url], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    env = dict(l[len("export "):].split("=", 1) for l in out.stdout.splitlines())
    assert env["OPENAI_BASE_URL"] == f"'{server.url}/v1'"
    assert env["ANTHROPIC_BASE_URL"] == f"'{server.url}'"
    assert env["OPENAI_MODEL"] == f"'{MODEL}'" and env["ANTHROPIC_MODEL"] == f"'{MODEL}'"
    assert "OPENAI_API_KEY" in env and "ANTHROPIC_API_KEY" in env
    run = subprocess.run([str(basalt_bin()), "run", "--url", server.url, "--", "sh", "-c",
                          "echo $OPENAI_BASE_URL $ANTHROPIC_MODEL"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [server.url + "/v1", MODEL]
    bad = subprocess.run([str(basalt_bin()), "env", "--url", "http://127.0.0.1:9"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "no basalt server" in bad.stderr


def test_speculative_servers_give_the_plain_text(server):
    """`serve --spec dspark:models/dspark` (the trained DSpark drafter) and `--spec ngram`: the
    same completions as the plain server, greedy and sampled with a seed, requests in flight
    together; the drafters did draft and some drafts stood."""
    prompts = ["And God said", "In the beginning", "And Moses said unto the LORD",
               "Blessed is the man"]

    def complete(url, i, seed, out):
        c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        r = c.completions.create(model=MODEL, prompt=prompts[i % len(prompts)], max_tokens=48,
                                 temperature=0 if seed is None else 0.8, seed=seed)
        out[(i, seed)] = r.choices[0].text

    jobs = [(i, seed) for i in range(len(prompts)) for seed in (None, 7)]
    plain = {}
    for i, seed in jobs:
        complete(server.url, i, seed, plain)
    for spec in ("dspark:" + str(REPO / "models" / "dspark"), "ngram"):
        s = Server("--spec", spec, "--spec-tokens", "4")
        try:
            got = {}
            threads = [threading.Thread(target=complete, args=(s.url, i, seed, got))
                       for i, seed in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert got == plain, spec
            m = s.metrics()
            assert m["basalt_spec_draft_tokens_total"] > 0, spec
            assert m["basalt_spec_accepted_tokens_total"] > 0, spec
        finally:
            s.stop()
        assert s.proc.returncode == 0, s.log()


def test_step_tokens_changes_no_output(server):
    """`serve --step-tokens 5`: prompts arrive in chunks of at most 5 tokens a pass, mixed with
    the other requests' decode rows; every greedy completion is the default server's. A long
    prompt sent alone to a fresh server shows the bound takes effect: its prefill takes a pass
    per 5 tokens (the server's exit line counts the passes; 1 with the default)."""
    prompts = ["And it came to pass after these things, that God did tempt Abraham, and said",
               "In the beginning God created the heaven and the earth. And the earth was",
               "Blessed is the man that walketh not in the counsel of the ungodly",
               " ".join(["And the LORD spake unto Moses, saying,"] * 8)]
    long_prompt = len(prompts) - 1

    def complete(url, i, out, max_tokens=24):
        c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        r = c.completions.create(model=MODEL, prompt=prompts[i], max_tokens=max_tokens,
                                 temperature=0)
        out[i] = (r.choices[0].text, r.usage.prompt_tokens)

    plain = {}
    for i in range(long_prompt):
        complete(server.url, i, plain)
    complete(server.url, long_prompt, plain, max_tokens=1)

    s = Server("--step-tokens", "5")
    try:
        got = {}
        complete(s.url, long_prompt, got, max_tokens=1)
    finally:
        s.stop()
    assert s.proc.returncode == 0, s.log()
    assert got[long_prompt] == plain[long_prompt]
    long_tokens = plain[long_prompt][1]
    assert long_tokens > 40
    steps = int(re.search(r"(\d+) engine steps", s.log()).group(1))
    assert steps == (long_tokens + 4) // 5, (steps, long_tokens)

    s = Server("--step-tokens", "5")
    try:
        threads = [threading.Thread(target=complete, args=(s.url, i, got))
                   for i in range(long_prompt)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert got == plain
    finally:
        s.stop()
    assert s.proc.returncode == 0, s.log()


def test_second_server_on_a_port_in_use_is_refused(server):
    """A second `basalt serve` on the running server's port exits with a clear error (with
    SO_REUSEPORT, cpp-httplib's default, it bound too and the kernel split the connections
    between the two), and the first keeps serving."""
    p = subprocess.run([str(basalt_bin()), "serve", "--port", str(server.port)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "cannot bind" in p.stderr, p.stderr
    for _ in range(8):  # every connection reaches the first server
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    assert server.alive()


def test_warmup_before_clients_and_not_counted():
    """The start-up request (--no-warmup skips it) runs before the server listens, and /metrics
    counts none of it."""
    s = Server()
    try:
        assert re.search(r"warmup \(96-token prompt, 2 tokens\) in \d+ ms", s.log()), s.log()
        m = s.metrics()
        assert m["basalt_engine_requests_total"] == 0
        assert m["basalt_prefix_cache_hit_tokens_total"] == 0
    finally:
        s.stop()
    s = Server("--no-warmup")
    try:
        assert "warmup" not in s.log()
    finally:
        s.stop()
