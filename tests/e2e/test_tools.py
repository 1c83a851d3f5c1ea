"""Tool calls and reasoning through the same HTTP path as real output: the test-only request
field basalt_forced_output (honoured with --enable-test-hooks) fixes what the model emits, and
the server must parse it into each API's tool-call and reasoning shapes."""
import json

from conftest import MODEL

CALL_ARGS = {"city": "Paris", "unit": "celsius"}
CALL_TEXT = ('<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(CALL_ARGS) +
             '}\n</tool_call>')
THINK_TEXT = "<think>The user greets me.</think>Hello there!"

OPENAI_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string"}},
                   "required": ["city"]}}}]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
                    "parameters": OPENAI_TOOLS[0]["function"]["parameters"]}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Weather in a city",
                    "input_schema": OPENAI_TOOLS[0]["function"]["parameters"]}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def forced(text):
    return {"basalt_forced_output": text, "temperature": 0}


# --- OpenAI chat -------------------------------------------------------------------------

def test_chat_tool_call(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, tools=OPENAI_TOOLS,
                                    max_tokens=400, extra_body=forced(CALL_TEXT))
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert not c.message.content
    (call,) = c.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == CALL_ARGS
    assert call.id


def test_chat_tool_call_stream(oai):
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK, tools=OPENAI_TOOLS,
                                              max_tokens=400, stream=True,
                                              extra_body=forced(CALL_TEXT)))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function.name == "get_weather"
    args = [d.function.arguments for d in deltas if d.function and d.function.arguments]
    assert len(args) > 1, "arguments should stream as several deltas"
    assert json.loads("".join(args)) == CALL_ARGS
    assert all(d.index == 0 for d in deltas)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "<tool_call>" not in content


def test_chat_tool_result_history(oai):
    r = oai.chat.completions.create(
        model=MODEL, max_tokens=8, temperature=0, tools=OPENAI_TOOLS,
        messages=ASK + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps(CALL_ARGS)}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}])
    short = oai.chat.completions.create(model=MODEL, max_tokens=8, temperature=0,
                                        tools=OPENAI_TOOLS, messages=ASK)
    assert r.usage.prompt_tokens > short.usage.prompt_tokens + 10


def test_chat_reasoning(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=200,
                                    extra_body=forced(THINK_TEXT))
    msg = r.choices[0].message
    assert msg.reasoning_content.strip() == "The user greets me."
    assert msg.content.strip() == "Hello there!"
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=200,
                                              stream=True, extra_body=forced(THINK_TEXT)))
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                        for c in chunks if c.choices)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert reasoning.strip() == "The user greets me."
    assert content.strip() == "Hello there!"


# --- OpenAI Responses --------------------------------------------------------------------

def test_responses_function_call(oai):
    r = oai.responses.create(model=MODEL, input="Weather in Paris?", tools=RESPONSES_TOOLS,
                             max_output_tokens=400, extra_body=forced(CALL_TEXT))
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1
    assert calls[0].name == "get_weather" and json.loads(calls[0].arguments) == CALL_ARGS
    assert calls[0].call_id


def test_responses_function_call_stream(oai):
    events = list(oai.responses.create(model=MODEL, input="Weather in Paris?",
                                       tools=RESPONSES_TOOLS, max_output_tokens=400,
                                       stream=True, extra_body=forced(CALL_TEXT)))
    added = [e for e in events if e.type == "response.output_item.added"]
    assert added and added[0].item.type == "function_call"
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and json.loads("".join(deltas)) == CALL_ARGS
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(done[0].arguments) == CALL_ARGS
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.output[0].type == "function_call"


def test_responses_function_call_output_history(oai):
    r = oai.responses.create(
        model=MODEL, max_output_tokens=8, temperature=0, tools=RESPONSES_TOOLS,
        input=[{"role": "user", "content": "Weather in Paris?"},
               {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                "arguments": json.dumps(CALL_ARGS)},
               {"type": "function_call_output", "call_id": "call_1", "output": "18 C, sunny"}])
    assert r.status in ("completed", "incomplete")
    assert r.usage.input_tokens > 20


def test_responses_reasoning(oai):
    r = oai.responses.create(model=MODEL, input="Hi", max_output_tokens=200,
                             extra_body=forced(THINK_TEXT))
    kinds = [o.type for o in r.output]
    assert kinds == ["reasoning", "message"]
    assert r.output_text.strip() == "Hello there!"
    events = list(oai.responses.create(model=MODEL, input="Hi", max_output_tokens=200,
                                       stream=True, extra_body=forced(THINK_TEXT)))
    assert any(e.type == "response.reasoning_text.delta" for e in events)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text.strip() == "Hello there!"


# --- Anthropic Messages ------------------------------------------------------------------

def test_messages_tool_use(claude):
    m = claude.messages.create(model=MODEL, max_tokens=400, messages=ASK, tools=ANTHROPIC_TOOLS,
                               extra_body=forced(CALL_TEXT))
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and uses[0].input == CALL_ARGS


def test_messages_tool_use_stream(claude):
    with claude.messages.stream(model=MODEL, max_tokens=400, messages=ASK,
                                tools=ANTHROPIC_TOOLS, extra_body=forced(CALL_TEXT)) as s:
        events = list(s)
        final = s.get_final_message()
    partial = [e.delta.partial_json for e in events
               if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert len(partial) > 1 and json.loads("".join(partial)) == CALL_ARGS
    assert final.stop_reason == "tool_use"
    uses = [b for b in final.content if b.type == "tool_use"]
    assert uses[0].input == CALL_ARGS and uses[0].id


def test_messages_tool_result_history(claude):
    m = claude.messages.create(
        model=MODEL, max_tokens=8, tools=ANTHROPIC_TOOLS, extra_body={"temperature": 0},
        messages=ASK + [
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": CALL_ARGS}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C, sunny"}]}])
    assert m.usage.input_tokens > 20


def test_messages_thinking(claude):
    m = claude.messages.create(model=MODEL, max_tokens=200, messages=ASK,
                               extra_body=forced(THINK_TEXT))
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking.strip() == "The user greets me."
    assert m.content[1].text.strip() == "Hello there!"
    with claude.messages.stream(model=MODEL, max_tokens=200, messages=ASK,
                                extra_body=forced(THINK_TEXT)) as s:
        events = list(s)
        final = s.get_final_message()
    assert any(e.type == "content_block_delta" and e.delta.type == "thinking_delta"
               for e in events)
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[1].text.strip() == "Hello there!"
