#!/usr/bin/env python3
"""Golden chat-template renderings for tests/unit/test_chat_template.cpp.

Renders a fixed set of conversations with transformers' own
`apply_chat_template(..., tokenize=False)` on tokenizers built from real tokenizer_config.json /
tokenizer.json files, and writes one JSON file per template to tests/golden/chat/<name>.json:

  {"template": NAME, "tokenizer_dir": REL, "cases": [
     {"name", "messages", "tools", "add_generation_prompt", "extra", "expected" | "error"}]}

`tokenizer_dir` is relative to the shared fixtures folder ("fixtures:qwen3-tokenizer") or to the
repository ("repo:models/default"). Cases that transformers rejects are recorded with the error
text under "error" (the C++ side only checks that rendering throws).

Run on CPU with the reference venv:
  /work/venv-ref/bin/python tools/make_chat_fixtures.py [--fixtures ../shared/fixtures]
"""
import argparse
import copy
import json
import os

from transformers import AutoTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "when": {
                        "type": "object",
                        "properties": {"day": {"type": "integer"}, "hour": {"type": "number"}},
                    },
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web — returns snippets.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer", "default": 5},
                    "filters": {"type": "array", "items": {"type": "string"}},
                    "safe": {"type": "boolean"},
                },
                "required": ["query"],
            },
        },
    },
]

SYS = {"role": "system", "content": "You are a helpful assistant."}


def u(text):
    return {"role": "user", "content": text}


def a(text, **kw):
    return {"role": "assistant", "content": text, **kw}


TOOL_CALL_TURN = a(
    "",
    tool_calls=[
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
        {"id": "call_2", "type": "function",
         "function": {"name": "search", "arguments": "{\"query\": \"Paris events\", \"limit\": 3}"}},
    ],
)

CASES = [
    ("system_user_gen", [SYS, u("Hello!")], None, True, {}),
    ("system_user_nogen", [SYS, u("Hello!")], None, False, {}),
    ("user_only_gen", [u("What is 2+2?")], None, True, {}),
    ("multi_turn", [SYS, u("Hi"), a("Hello! How can I help?"), u("Tell me a joke."),
                    a("Why did the chicken cross the road?"), u("Why?")], None, True, {}),
    ("multi_turn_ends_assistant", [u("Hi"), a("Hello there.")], None, False, {}),
    ("reasoning_content_earlier_turn",
     [u("What is 3*7?"), a("21", reasoning_content="3 times 7 is 21."), u("And 4*5?")], None, True, {}),
    ("reasoning_content_last_turn",
     [u("What is 3*7?"), a("21", reasoning_content="3 times 7 is 21.")], None, False, {}),
    ("think_in_content_earlier_turn",
     [u("Q1"), a("<think>\nLet me think.\n</think>\n\nAnswer one."), u("Q2")], None, True, {}),
    ("think_in_content_last_turn",
     [u("Q1"), a("<think>\nLet me think.\n</think>\n\nAnswer one.")], None, False, {}),
    ("enable_thinking_false", [u("Hi")], None, True, {"enable_thinking": False}),
    ("enable_thinking_true", [u("Hi")], None, True, {"enable_thinking": True}),
    ("tools_user_gen", [SYS, u("What's the weather in Paris?")], TOOLS, True, {}),
    ("tools_no_system", [u("Weather?")], TOOLS, True, {}),
    ("tools_full_exchange",
     [SYS, u("Weather in Paris and events?"), TOOL_CALL_TURN,
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18, \"sky\": \"clear\"}"},
      {"role": "tool", "tool_call_id": "call_2", "content": "Jazz festival tonight."},
      a("It is 18°C and clear; there is a jazz festival tonight."), u("Thanks!")],
     TOOLS, True, {}),
    ("tool_call_with_text",
     [u("Weather?"), a("Let me check.", tool_calls=[TOOL_CALL_TURN["tool_calls"][0]]),
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], TOOLS, True, {}),
    ("tool_call_content_null",
     [u("Weather?"), a(None, tool_calls=[TOOL_CALL_TURN["tool_calls"][0]])], TOOLS, False, {}),
    ("content_text_parts",
     [{"role": "user", "content": [{"type": "text", "text": "Part one."},
                                   {"type": "text", "text": "Part two."}]}], None, True, {}),
    ("unicode_emoji", [u("Grüße! 你好 🌍👋🏽 — «ok» \"q\" \\ tab\there")], None, True, {}),
    ("trailing_space", [SYS, u("Hello there ")], None, True, {}),
    ("newlines_in_content", [u("\nline1\n\nline2\n")], None, False, {}),
]


# Small templates, one construct each, rendered by transformers' own jinja2 environment
# (trim_blocks, lstrip_blocks, its tojson): tests/golden/chat/jinja.json for test_jinja.cpp.
JINJA_VARS = {"m": {"a": 1, "b": [1, 2], "s": "x"}, "l": [3, 1, 2], "s": "héllo wörld", "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
     "people": [{"name": "Bo", "age": 30}, {"name": "al", "age": 25}, {"name": "Cy", "age": 30}], "e": "", "n": None, "f": 2.5}
JINJA_CASES = [
 # output, literals
 ("{{ 'a' ~ 1 ~ none ~ true }}", None),
 ("{{ \"q\\\"\\n\\t\\u00e9\" }}", None),
 ("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}", None),
 ("{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 1e-5 }}|{{ 3 * 1.5 }}|{{ 10 / 2 }}", None),
 ("{{ [1, 'a', none, true, 2.0] }}|{{ {'k': 'v', 'n': [1]} }}|{{ (1,) }}|{{ (1, 'b') }}", None),
 ("{{ \"it's\" }}|{{ ['it\\'s', 'say \"hi\"', 'both \\' \"'] }}", None),
 ("{{ m }}|{{ m.b }}|{{ m['s'] }}|{{ m.b[1] }}|{{ m.b.0 }}|{{ l[-1] }}|{{ l[5] }}|{{ m.zz }}|", None),
 ("{{ s[1:3] }}|{{ s[::-1] }}|{{ l[::-1] }}|{{ l[1:] }}|{{ l[:-1] }}|{{ s[-5:] }}|{{ l[::2] }}", None),
 # conditionals
 ("{% if n %}A{% elif m.a == 1 %}B{% else %}C{% endif %}", None),
 ("{{ 'y' if m.a else 'n' }}|{{ 'y' if e }}|{{ 'y' if not e else 'n' }}", None),
 ("{{ m.a and 'x' }}|{{ e or 'd' }}|{{ n or e or 0 }}|{{ not m }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}", None),
 ("{{ 'x' in m.s }}|{{ 'b' in m }}|{{ 2 in l }}|{{ 5 not in l }}|{{ 'é' in s }}|{{ 'q' in m.zz }}", None),
 ("{{ m is mapping }}{{ l is sequence }}{{ s is string }}{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.5 is float }}{{ n is none }}{{ m.zz is undefined }}{{ m.a is defined }}{{ true is boolean }}{{ l is iterable }}", None),
 ("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 1 is equalto 1 }}{{ 1 is eq 2 }}{{ false is false }}{{ 0 is false }}{{ true is true }}{{ 2 is in l }}{{ n is not none }}{{ false is sameas false }}", None),
 # loops
 ("{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}:{{ x }} {% endfor %}", None),
 ("{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{{ loop.last }},{% endfor %}", None),
 ("{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in m %}{{ k }}{% endfor %}|{% for c in 'ab' %}{{ c }}.{% endfor %}", None),
 ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}", None),
 ("{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}/{{ loop.cycle('a', 'b') }} {% endfor %}", None),
 ("{% for msg in msgs[::-1] %}{{ loop.index0 }}{{ msg.role }}{% endfor %}", None),
 # set / scoping / namespace
 ("{% set x = 1 %}{% for i in l %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", None),
 ("{% set ns = namespace(total=0, found=false) %}{% for i in l %}{% set ns.total = ns.total + i %}{% if i == 1 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.total }}{{ ns.found }}", None),
 ("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (1, 2) %}{{ t }}|{% set blk %}  in {{ m.a }} {% endset %}[{{ blk }}]", None),
 ("{% set up | upper %}abc{% endset %}{{ up }}", None),
 # filters
 ("{{ l|length }}{{ s|length }}{{ m|length }}{{ m.zz|length }}|{{ l|first }}{{ l|last }}{{ s|first }}|{{ l|sort }}{{ l|sort(reverse=true) }}|{{ l|sum }}{{ l|min }}{{ l|max }}", None),
 ("{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ s|upper }}|{{ 'ABC'|lower }}|{{ 'hello world'|capitalize }}|{{ 'hello wORLD-x'|title }}", None),
 ("{{ 'a-b-c'|replace('-', '+') }}|{{ 'a-b-c'|replace('-', '', 1) }}|{{ l|join(', ') }}|{{ l|join }}|{{ people|join(',', attribute='name') }}", None),
 ("{{ m.zz|default('d') }}|{{ e|default('d') }}|{{ e|default('d', true) }}|{{ n|default('d') }}|{{ m.a|d(5) }}", None),
 ("{{ '3'|int + 1 }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 3.9|int }}|{{ '2.5'|float }}|{{ 3|float }}|{{ 1|string ~ 2 }}|{{ '12'|int is integer }}", None),
 ("{{ m|items|list }}|{{ m|dictsort }}|{{ 'ab'|list }}|{{ [3, 1, 3, 'a', 'A']|unique|list }}|{{ l|reverse|list }}|{{ 'abc'|reverse }}", None),
 ("{{ people|map(attribute='name')|list }}|{{ people|selectattr('age', 'equalto', 30)|map(attribute='name')|join(',') }}|{{ people|rejectattr('age', 'gt', 26)|list|length }}", None),
 ("{{ l|select('odd')|list }}|{{ l|reject('odd')|list }}|{{ [0, 1, '', 'a']|select|list }}|{{ l|map('string')|join('-') }}|{{ ['a', 'B']|map('upper')|list }}", None),
 ("{{ people|sort(attribute='name')|map(attribute='name')|join }}|{{ people|sort(attribute='age', reverse=true)|map(attribute='name')|join }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}", None),
 ("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\nb'|indent('> ', first=true) }}|{{ '<b>&\"x\"\\'</b>'|e }}|{{ '<b>'|safe }}", None),
 ("{{ m|tojson }}|{{ [1, 2.5, 'é\n\"\\\\', none, true]|tojson }}|{{ m|tojson(indent=2) }}|{{ {}|tojson }}|{{ []|tojson(indent=2) }}|{{ {'b': 1, 'a': {'c': [], 'd': {}}}|tojson(indent=2) }}", None),
 ("{{ {'z': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ {'a': [1, 2]}|tojson(separators=(',', ':')) }}|{{ '<\u2028>'|tojson }}|{{ 'x'|tojson }}|{{ 1e100|tojson }}", None),
 ("{{ '%s is %d'|format('x', 3) }}|{{ '%s'|format(m.b) }}|{{ 3.14159|round(2) }}|{{ 2.5|round }}|{{ -3|abs }}|{{ 'a b  c'|wordcount }}", None),
 # methods
 ("{{ s.startswith('hé') }}{{ s.endswith('x') }}{{ s.startswith(('a', 'h')) }}|{{ ' a '.strip() }}|{{ 'xax'.strip('x') }}|{{ '\n\na\n'.lstrip('\n') }}|{{ 'a  '.rstrip() }}", None),
 ("{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'x</think>y'.split('</think>')[-1] }}", None),
 ("{{ s.upper() }}|{{ 'Ab'.lower() }}|{{ 'hello world'.title() }}|{{ 'ab'.capitalize() }}|{{ 'aXa'.replace('a', 'b') }}|{{ s.find('w') }}|{{ 'abc'.find('z') }}|{{ 'aaa'.count('a') }}", None),
 ("{{ '-'.join(['a', 'b']) }}|{{ '{} and {}'.format('x', 1) }}|{{ '{0}{name}'.format('p', name='q') }}|{{ 'a\nb'.splitlines() }}|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}", None),
 ("{{ m.get('a') }}|{{ m.get('zz') }}|{{ m.get('zz', 'dflt') }}|{{ m.keys()|list }}|{{ m.values()|list }}|{{ l.index(1) }}|{{ l.count(3) }}", None),
 # globals, macros
 ("{{ range(3)|list }}|{{ range(1, 7, 2)|list }}|{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}|{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}", None),
 ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bo') }} {{ greet('Al', punct='?') }} {{ greet(name='Cy', punct='.') }}", None),
 ("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside {{ m.a }}{% endcall %}", None),
 ("{% filter upper %}abc {{ m.s }}{% endfilter %}|{% raw %}{{ not rendered }}{% endraw %}|{# comment #}x", None),
 # whitespace control and HF's trim_blocks / lstrip_blocks
 ("a\n  {% if true %}\n  b\n  {% endif %}\n  c {{ 1 }}\n", None),
 ("a  {%- if true -%}  b  {%- endif -%}  c\n{{- ' d ' -}}\n e", None),
 ("x\n    {%+ if true %}y{% endif +%}\nz", None),
 ("{% for i in l %}\n  - {{ i }}\n{% endfor %}\ndone", None),
 ("  {# comment #}\nA\n{%- set x = 1 %}\nB", None),
 ("{{ 'a' }}\n{{ 'b' }}\n", None),
 ("line1\r\nline2\r\n{% if true %}\r\nx{% endif %}", None),
 # errors (expected error substrings checked in C++)
 ("{{ m.zz.yy }}", "ERR"), ("{{ 'a' + 1 }}", "ERR"), ("{{ 1 + 'a' }}", "ERR"), ("{{ m.zz + 'a' }}", "ERR"),
 ("{{ raise_exception('boom') }}", "ERR"), ("{{ m.zz|tojson }}", "ERR"), ("{{ 1 < 'a' }}", "ERR"),
 ("{% for x in n %}{% endfor %}", "ERR"), ("{{ m.zz() }}", "ERR"), ("{{ 1 / 0 }}", "ERR"),
 ("{% if true %}", "ERR"), ("{{ 1 + }}", "ERR"), ("{% endfor %}", "ERR"), ("{{ l|nosuchfilter }}", "ERR"),
 ("{{ 1 is nosuchtest }}", "ERR"), ("{% set m.a = 1 %}", "ERR"), ("{{ 'x' in 3 }}", "ERR"),
]


def write_jinja_cases(out_dir):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    cases = []
    for src, _ in JINJA_CASES:
        try:
            cases.append({"template": src,
                          "expected": _compile_jinja_template(src).render(**JINJA_VARS)})
        except Exception as e:  # recorded; the C++ side checks that it throws too
            cases.append({"template": src, "error": f"{type(e).__name__}: {e}"})
    out = os.path.join(out_dir, "jinja.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"vars": JINJA_VARS, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{out}: {len(cases)} cases")


def render(tok, messages, tools, agp, extra):
    return tok.apply_chat_template(copy.deepcopy(messages), tools=copy.deepcopy(tools),
                                   add_generation_prompt=agp, tokenize=False, **extra)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(REPO, "..", "shared", "fixtures"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "chat"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    targets = [
        ("qwen3", os.path.join(args.fixtures, "qwen3-tokenizer"), "fixtures:qwen3-tokenizer"),
        ("llama3", os.path.join(args.fixtures, "llama3-tokenizer"), "fixtures:llama3-tokenizer"),
        ("default", os.path.join(REPO, "models", "default"), "repo:models/default"),
    ]
    write_jinja_cases(args.out)
    for name, path, rel in targets:
        tok = AutoTokenizer.from_pretrained(path)
        cases = []
        for cname, messages, tools, agp, extra in CASES:
            case = {"name": cname, "messages": messages, "tools": tools,
                    "add_generation_prompt": agp, "extra": extra}
            try:
                case["expected"] = render(tok, messages, tools, agp, extra)
            except Exception as e:  # transformers/jinja2 rejected it: record the reason
                case["error"] = f"{type(e).__name__}: {e}"
            cases.append(case)
        out = os.path.join(args.out, f"{name}.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"template": name, "tokenizer_dir": rel, "cases": cases}, f,
                      ensure_ascii=False, indent=1)
            f.write("\n")
        n_err = sum("error" in c for c in cases)
        print(f"{out}: {len(cases)} cases ({n_err} errors)")


if __name__ == "__main__":
    main()
