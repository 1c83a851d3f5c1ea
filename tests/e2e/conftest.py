"""Fixtures for the end-to-end tests: a real `basalt serve` on the embedded default model,
driven with the official OpenAI and Anthropic SDKs.

BASALT_BIN: the basalt binary (default build/basalt, relative to the repository root).
"""
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = "basalt-default"


def basalt_bin():
    b = Path(os.environ.get("BASALT_BIN", "build/basalt"))
    return b if b.is_absolute() else REPO / b


class Server:
    """One `basalt serve` process on a free loopback port (--port 0; the port is read from
    its startup line). stderr is drained on a thread (it carries one line per request)."""

    def __init__(self, *extra, hooks=True):
        hook = ["--enable-test-hooks"] if hooks else []
        self.proc = subprocess.Popen(
            [str(basalt_bin()), "serve", "--port", "0", *hook, "--parallel", "4", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.lines.append(line)
                m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.thread = threading.Thread(target=drain, daemon=True)
        self.thread.start()
        if not ready.wait(60) or self.port is None:
            self.stop()
            raise RuntimeError("basalt serve did not start:\n" + "".join(self.lines))
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("basalt serve never became healthy:\n" + "".join(self.lines))

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        return "".join(self.lines)

    def metrics(self):
        """GET /metrics as {sample name with labels: value}."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: graceful shutdown
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(5)


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()
    assert s.proc.returncode == 0, "basalt serve did not exit cleanly on SIGTERM:\n" + s.log()


@pytest.fixture(scope="session")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


@pytest.fixture(scope="session")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0,
                               timeout=120)


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture()
def still_serves(oai):
    """Called after a bad request: a normal request still works."""
    def check():
        r = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                        max_tokens=4, temperature=0)
        assert r.choices[0].finish_reason in ("stop", "length")
        assert r.usage.completion_tokens >= 1
    return check
