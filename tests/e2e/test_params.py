"""Stop strings, logprobs and token limits."""
import math

from conftest import MODEL

ASK = [{"role": "user", "content": "Say something."}]
TEXT = "Hello world. STOP here and more"


def forced(text, **kw):
    return {"basalt_forced_output": text, "temperature": 0, **kw}


def test_stop_string_chat(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=200, stop=["STOP"],
                                    extra_body=forced(TEXT))
    # (chat output of a reasoning model is trimmed at the end: exact text is checked on
    # /v1/completions below, which passes the raw text through)
    assert r.choices[0].message.content.rstrip() == "Hello world."
    assert r.choices[0].finish_reason == "stop"
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=200,
                                              stop="STOP", stream=True,
                                              extra_body=forced(TEXT)))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.rstrip() == "Hello world."


def test_stop_string_split_across_tokens(oai):
    # "ld. ST" spans token boundaries; nothing of it may leak.
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=200,
                                    stop=["ld. ST", "never"], stream=False,
                                    extra_body=forced(TEXT))
    assert r.choices[0].message.content == "Hello wor"


def test_stop_string_completions(oai):
    r = oai.completions.create(model=MODEL, prompt="x", max_tokens=200, stop=["here"],
                               extra_body=forced(TEXT))
    assert r.choices[0].text == "Hello world. STOP "
    assert r.choices[0].finish_reason == "stop"


def test_ignore_eos(oai):
    # The forced text holds the template's end of turn: generation stops there, unless
    # ignore_eos (vLLM's extension) lets it run on to the token limit.
    body = forced("Hello world.<|im_end|> after the end of the turn")
    r = oai.completions.create(model=MODEL, prompt="x", max_tokens=8, extra_body=body)
    assert r.choices[0].text == "Hello world."
    assert r.choices[0].finish_reason == "stop"
    stopped = r.usage.completion_tokens
    assert stopped < 8
    r = oai.completions.create(model=MODEL, prompt="x", max_tokens=8,
                               extra_body={**body, "ignore_eos": True})
    assert r.choices[0].text.startswith("Hello world. after")
    assert (r.choices[0].finish_reason, r.usage.completion_tokens) == ("length", 8)
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8,
                                              stream=True, stream_options={"include_usage": True},
                                              extra_body={**body, "ignore_eos": True}))
    assert chunks[-1].usage.completion_tokens == 8
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_stop_sequence_messages(claude):
    m = claude.messages.create(model=MODEL, max_tokens=200, messages=ASK,
                               stop_sequences=["STOP"], extra_body=forced(TEXT))
    assert m.content[0].text.rstrip() == "Hello world."
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "STOP"
    with claude.messages.stream(model=MODEL, max_tokens=200, messages=ASK,
                                stop_sequences=["STOP"], extra_body=forced(TEXT)) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text.rstrip() == "Hello world."
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "STOP"


def test_max_tokens_length(oai, claude):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=3,
                                    extra_body=forced(TEXT))
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    m = claude.messages.create(model=MODEL, max_tokens=3, messages=ASK, extra_body=forced(TEXT))
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3
    resp = oai.responses.create(model=MODEL, input="x", max_output_tokens=3,
                                extra_body=forced(TEXT))
    assert resp.status == "incomplete"
    assert resp.incomplete_details.reason == "max_output_tokens"


def test_chat_logprobs(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, temperature=0,
                                    logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    assert "".join(t.token for t in lp) == r.choices[0].message.content
    for t in lp:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].token == t.token  # greedy: the best one was chosen
        assert math.isclose(t.top_logprobs[0].logprob, t.logprob, abs_tol=1e-5)
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token or t.bytes
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8,
                                              temperature=0, logprobs=True, top_logprobs=2,
                                              stream=True))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in lp]


def test_completions_logprobs(oai):
    r = oai.completions.create(model=MODEL, prompt="And God said", max_tokens=6, temperature=0,
                               logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(len(t) == 2 for t in lp.top_logprobs)
    assert lp.text_offset[0] == 0
