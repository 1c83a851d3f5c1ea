"""--api-key: every /v1 endpoint wants the key, as a Bearer token or as x-api-key."""
import anthropic
import httpx
import openai
import pytest

from conftest import MODEL, Server

KEY = "sk-basalt-test"
MSGS = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def auth_server():
    s = Server("--api-key", KEY, hooks=False)
    yield s
    s.stop()


def test_health_needs_no_key(auth_server):
    assert httpx.get(auth_server.url + "/health").status_code == 200


@pytest.mark.parametrize("method,path", [
    ("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
    ("POST", "/v1/responses"), ("POST", "/v1/messages"), ("POST", "/v1/messages/count_tokens")])
def test_missing_or_wrong_key_is_401(auth_server, method, path):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": "wrong"}):
        r = httpx.request(method, auth_server.url + path, headers=headers,
                          json={"model": MODEL, "messages": MSGS, "max_tokens": 2})
        assert r.status_code == 401, (path, headers, r.text)
        j = r.json()
        if path.startswith("/v1/messages"):
            assert j["type"] == "error" and j["error"]["type"] == "authentication_error"
        else:
            assert j["error"]["type"] == "authentication_error"


def test_sdks_with_key(auth_server):
    oai = openai.OpenAI(base_url=auth_server.url + "/v1", api_key=KEY, max_retries=0)
    assert oai.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2).usage
    bad = openai.OpenAI(base_url=auth_server.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    # x-api-key (the Anthropic SDK's api_key) and Bearer (its auth_token) both work
    c1 = anthropic.Anthropic(base_url=auth_server.url, api_key=KEY, max_retries=0)
    assert c1.messages.create(model=MODEL, max_tokens=2, messages=MSGS).usage
    c2 = anthropic.Anthropic(base_url=auth_server.url, auth_token=KEY, max_retries=0)
    assert c2.messages.count_tokens(model=MODEL, messages=MSGS).input_tokens > 0
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=auth_server.url, api_key="nope",
                            max_retries=0).messages.create(model=MODEL, max_tokens=2,
                                                           messages=MSGS)


def test_test_hook_refused_without_flag(auth_server):
    r = httpx.post(auth_server.url + "/v1/chat/completions", headers={"x-api-key": KEY},
                   json={"messages": MSGS, "basalt_forced_output": "Hello"})
    assert r.status_code == 400
    assert "--enable-test-hooks" in r.json()["error"]["message"]
