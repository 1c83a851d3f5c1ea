"""Every endpoint through the official SDKs, non-streaming and streaming."""
import httpx

from conftest import MODEL

MSG = [{"role": "user", "content": "In the beginning"}]
# The Anthropic SDK (2.x) has no sampling arguments; the API still takes them.
GREEDY = {"temperature": 0}


def test_health_and_models(server, oai, claude):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    models = oai.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert [m.id for m in claude.models.list().data] == [MODEL]
    assert oai.models.retrieve(MODEL).id == MODEL


def test_chat(oai):
    r = oai.chat.completions.create(model=MODEL, messages=MSG, max_tokens=16, temperature=0)
    assert r.object == "chat.completion"
    assert r.model == MODEL
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 16
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_matches_non_stream(oai):
    full = oai.chat.completions.create(model=MODEL, messages=MSG, max_tokens=24, temperature=0)
    chunks = list(oai.chat.completions.create(model=MODEL, messages=MSG, max_tokens=24,
                                              temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_chat_system_and_history(oai):
    r = oai.chat.completions.create(
        model=MODEL, max_tokens=8, temperature=0,
        messages=[{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                  {"role": "assistant", "content": "Hello."},
                  {"role": "user", "content": "And?"}])
    assert r.usage.prompt_tokens > 10


def test_seeded_sampling_is_reproducible(oai):
    kw = dict(model=MODEL, messages=MSG, max_tokens=16, temperature=1.0, top_p=0.9, seed=1234,
              extra_body={"top_k": 40})
    a = oai.chat.completions.create(**kw).choices[0].message.content
    b = oai.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_sampling_parameters_accepted(oai):
    r = oai.chat.completions.create(model=MODEL, messages=MSG, max_completion_tokens=8,
                                    temperature=0.7, top_p=0.9, presence_penalty=0.5,
                                    frequency_penalty=0.5, seed=7,
                                    extra_body={"top_k": 20, "min_p": 0.05,
                                                "repetition_penalty": 1.1})
    assert 0 < r.usage.completion_tokens <= 8


def test_completions(oai):
    r = oai.completions.create(model=MODEL, prompt="And God said", max_tokens=12, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text
    assert r.usage.completion_tokens <= 12
    chunks = list(oai.completions.create(model=MODEL, prompt="And God said", max_tokens=12,
                                         temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_completions_token_ids_and_echo(oai):
    r = oai.completions.create(model=MODEL, prompt="And God said", max_tokens=4, temperature=0,
                               echo=True)
    assert r.choices[0].text.startswith("And God said")


def test_responses(oai):
    r = oai.responses.create(model=MODEL, input="In the beginning", max_output_tokens=16,
                             temperature=0, instructions="Answer briefly.")
    assert r.object == "response"
    assert r.status in ("completed", "incomplete")
    assert r.output_text
    assert r.usage.output_tokens <= 16 and r.usage.input_tokens > 0
    events = list(oai.responses.create(model=MODEL, input="In the beginning",
                                       max_output_tokens=16, temperature=0,
                                       instructions="Answer briefly.", stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created"
    assert "response.output_item.added" in types and "response.output_text.delta" in types
    assert types[-1] in ("response.completed", "response.incomplete")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == r.output_text
    assert events[-1].response.output_text == r.output_text
    seq = [e.sequence_number for e in events]
    assert seq == sorted(seq)


def test_responses_previous_id_is_rejected(oai):
    import openai
    try:
        oai.responses.create(model=MODEL, input="hi", previous_response_id="resp_123")
        raise AssertionError("expected a 400")
    except openai.BadRequestError as e:
        assert "stateless" in str(e)


def test_messages(claude):
    m = claude.messages.create(model=MODEL, max_tokens=16, extra_body=GREEDY,
                               system="Be brief.", messages=MSG)
    assert m.type == "message" and m.role == "assistant"
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 16
    with claude.messages.stream(model=MODEL, max_tokens=16, extra_body=GREEDY, system="Be brief.",
                                messages=MSG) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == m.content[0].text
    assert final.stop_reason == m.stop_reason
    assert final.usage.output_tokens == m.usage.output_tokens


def test_messages_raw_stream_events(claude):
    events = list(claude.messages.create(model=MODEL, max_tokens=8, extra_body=GREEDY,
                                         messages=MSG, stream=True))
    types = [e.type for e in events]
    assert types[0] == "message_start"
    assert "content_block_start" in types and "content_block_delta" in types
    assert types[-2:] == ["message_delta", "message_stop"]
    assert events[-2].usage.output_tokens > 0


def test_messages_system_blocks(claude):
    m = claude.messages.create(model=MODEL, max_tokens=4, extra_body=GREEDY,
                               system=[{"type": "text", "text": "Be brief."}],
                               messages=[{"role": "user",
                                          "content": [{"type": "text", "text": "Hi"}]}])
    assert m.usage.input_tokens > 0


def test_count_tokens(claude):
    n = claude.messages.count_tokens(model=MODEL, messages=MSG, system="Be brief.")
    m = claude.messages.create(model=MODEL, max_tokens=1, messages=MSG, system="Be brief.")
    assert n.input_tokens == m.usage.input_tokens


def test_metrics(server, oai):
    oai.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4, temperature=0)
    text = httpx.get(server.url + "/metrics").text
    for name in ["basalt_http_requests_total", "basalt_prompt_tokens_total",
                 "basalt_completion_tokens_total", "basalt_requests_queued",
                 "basalt_requests_running", "basalt_time_to_first_token_seconds_bucket",
                 "basalt_inter_token_latency_seconds_bucket", "basalt_kv_blocks_used",
                 "basalt_kv_blocks_total", "basalt_prefix_cache_hit_tokens_total"]:
        assert name in text, name
    m = server.metrics()
    assert m['basalt_http_requests_total{endpoint="/v1/chat/completions",status="200"}'] >= 1
    assert m["basalt_completion_tokens_total"] >= 4


def test_request_log_line(server, oai):
    oai.chat.completions.create(model=MODEL, messages=MSG, max_tokens=3, temperature=0)
    import time
    time.sleep(0.2)
    assert any(l.startswith("POST /v1/chat/completions 200 prompt=") and "completion=3" in l
               for l in server.lines), server.log()
