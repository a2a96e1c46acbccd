"""Chat templates and conversations that exercise the template language as chat templates use it,
for dev/check/chat_template_check.py (and the fixture of tests/test_chat_template.c it writes).
The templates are written here in the manner of the families' own (ChatML with a reasoning block,
Llama 3's headers, Gemma's turns), not copied from them, with {% generation %} marks around the
assistant's turns as TRL's training templates put them (they render the same text)."""

CHATML_THINKING = r"""{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- generation %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- content }}
            {%- endif %}
        {%- else %}
            {{- content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
        {%- endgeneration %}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

LLAMA3_HEADERS = r"""{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
    {%- if message['role'] == 'assistant' %}
        {%- generation %}{{- message['content'] | trim + '<|eot_id|>' }}{%- endgeneration %}
    {%- else %}
        {{- message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

GEMMA_TURNS = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if role == 'model' -%}
        {%- generation -%}
        {%- if message['content'] is string -%}
            {{ message['content'] | trim }}
        {%- endif -%}
        {{ '<end_of_turn>\n' }}
        {%- endgeneration -%}
    {%- else -%}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

# Every construct of the language once or more, with the white space rules around each kind of tag.
KITCHEN_SINK = r"""{# a comment #}
{%- macro turn(role, text, end='<|end|>') -%}
<|{{ role }}|>{{ text }}{{ end }}
{%- endmacro %}
{% for m in messages %}
  {% if m.role == 'system' %}
    {{ turn('sys', m.content|upper, end='') }}
  {% elif m.role in ['user', 'assistant'] %}
{{ turn(m.role, m.content) }} #{{ loop.index }}/{{ loop.length }}{% if loop.first %} first{% endif %}{% if loop.last %} last{% endif %}

  {% else %}
    other:{{ m.role }}
  {% endif %}
{% else %}
  no messages
{% endfor %}
{%- set total = namespace(chars=0, words=[]) %}
{%- for m in messages if m.content is string %}{% set total.chars = total.chars + m.content|length %}{% set total.words = total.words + m.content.split() %}{% endfor %}
chars {{ total.chars }} words {{ total.words|length }} first {{ total.words|first|default('-') }} last {{ (total.words|last) if total.words else 'none' }}
{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 8 }} {{ 7 / 2 }} {{ 1.5 * 2 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 123456789.0 }} {{ -0.5 }} {{ 3 - 5 }} {{ 10 / 4 * 2 }}
{{ 'abc' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1, 2] + [3] }} {{ 'x' in 'xyz' }} {{ 4 not in [1, 2] }} {{ 'k' in {'k': 1} }}
{{ 'héllo wörld'[1:4] }} {{ 'héllo'[-1] }} {{ 'héllo'|length }} {{ [1, 2, 3, 4, 5][::2] }} {{ [1, 2, 3][::-1] }} {{ 'abcdef'[-2:] }} {{ 'abc'[5:] }}|
{{ '  pad  '.strip() }}|{{ '--x--'.strip('-') }}|{{ '  l'.lstrip() }}|{{ 'r  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}
{{ 'Hello World'.lower() }} {{ 'hello world'.upper() }} {{ 'hello world'.title() }} {{ 'hello'.capitalize() }} {{ 'a-b-c'.replace('-', '+') }} {{ 'banana'.find('na') }} {{ 'banana'.count('a') }} {{ ', '.join(['x', 'y']) }}
{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith('abcd') }}
{{ none is none }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ 'x' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ undefined_thing is defined }} {{ undefined_thing is undefined }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 'a' is in ['a'] }} {{ 1 is not string }}
{{ undefined_thing }}|{{ undefined_thing|default('dflt') }}|{{ none|default('dflt') }}|{{ ''|default('dflt', true) }}|{{ undefined_thing|length }}|{{ undefined_thing == undefined_thing }}
{{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ [1, 2, 3]|join('-') }} {{ ['a', 'b']|join }} {{ 'MiXed'|lower }} {{ 'MiXed'|upper }} {{ '  t  '|trim }} {{ 42|string }} {{ '7'|int + 1 }} {{ 2.9|int }} {{ 'abc'|list }} {{ [1, 2]|reverse|list }} {{ 'abc'|reverse }} {{ -3|abs }} {{ 'a-b'|replace('-', '_') }} {{ 'the cat'|title }}
{{ {'b': 1, 'a': [1, 2.5, 'é"\n', none, true, false]}|tojson }}
{{ {'a': {'b': [1, {}], 'c': []}}|tojson(indent=2) }}
{{ [1, 'two', none, true, 1.0, {'k': 'v'}] }} {{ {'a': 1, 'b': 'it\'s'} }} {{ ["it's", 'say "hi"'] }}
{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }}{% if not loop.last %},{% endif %}{% endfor %} {% for k, v in {'name': 'f', 'return': 'r', 'd': 'x'}.items() if k != 'return' %}{{ k }}{{ loop.length }},{% endfor %} {{ [1, 2, 3, 4]|select('even')|list }} {{ ['a', 'code', 'b']|reject('equalto', 'code')|list }} {{ [0, 1, '', 'x']|select|list }} {{ undefined_thing|list }}
{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %} {% for c in 'héy' %}[{{ c }}]{% endfor %} {{ {'x': 1}.get('x') }} {{ {'x': 1}.get('z') }} {{ {'x': 1}.get('z', 9) }} {{ {'x': 1, 'y': 2}.keys()|list }} {{ {'x': 1, 'y': 2}.values()|list }}
{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %} {{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }}
{% for x in [1, 2, 3] %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem|default('_') }}{{ loop.nextitem|default('_') }} {% endfor %}
{% for x in [10, 20, 30, 40] if x > 15 %}{{ loop.index }}:{{ x }}{% if loop.last %}.{% endif %} {% endfor %}
{% set greeting %}hi {{ messages|length }}{% endset %}[{{ greeting }}] {% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}
{{ 'yes' if messages else 'no' }} {{ 'a' if false }}| {{ 1 if 0 else 2 if 0 else 3 }} {{ not none }} {{ none or 'x' }} {{ 0 and 'y' }} {{ 'p' and 'q' }}
{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }} {{ messages|map(attribute='role')|join(',') }}
{{ (messages|length) > 1 and messages[0].role != messages[1].role }} {{ messages[0]['role'] }} {{ messages.0.role }} {{ messages[-1].content[:5] }}
  {%- if true %}   strip-before{% endif -%}
   strip-after
{%+ if true %}keep-lstrip{% endif +%}
keep-trim
  {{ 'var tag keeps' }}  
"""

# Python's semantics where chat templates meet them: chained comparisons, `~` between + and *,
# tuples, string methods over Unicode (full case mappings, the final sigma, white space beyond
# ASCII), the sequence filters, macros inside loops, and every message's text through them.
PYTHON_SEMANTICS = r"""{% macro said(m) %}{% generation %}<{{ m.role }}>{% endgeneration %}{% endmacro %}
{%- for m in messages %}{% if m.role == 'assistant' %}[{{ said(m) }}]{% generation %}{{ m.content if m.content is string else '' }}<end>{% set inner = 1 %}{% endgeneration %}{{ inner is defined }}{% else %}{{ m.role }}{% endif %}{% endfor %}
{% set block %}{% generation %}in a set block{% endgeneration %}{% endset %}{{ block }}
{% set wide %}pré{% generation %}{{ messages[-1].content if messages[-1].content is string else '' }}é{% endgeneration %}{% endset %}[{{ wide }}]
{{ [1, 2] * 3 }} {% set a = [1, 2] * 3 %}{% set b = ["x", "y", "z"] %}{{ a }} {{ "abc"[1::9223372036854775807] }} {{ "abcdef"[::-9223372036854775807] }}
{{ "12".partition("2")[0]|int }} {{ "x"|int(7) }} {{ " 42 "|int }} {{ "42.7"|int }} {{ "0x10"|int }} {{ "-3"|int }} {{ 2.9|int }} {{ none|int(5) }}
{{ [1, 2]|tojson(separators=("a,b".partition(",")[0], ":")) }} {{ {"k": [1]}|tojson(indent=1) }}
{% for i in [1, 2] %}{% macro f() %}{{ y }}{% endmacro %}{% set y = i %}{{ f() }}{% endfor %} {% set x = 1 %}{% macro g() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ g() }}
{{ [1, 2, 3, 4]|slice(2, 'x')|list }} {{ [1, 2, 3, 4, 5]|slice(2, 'x')|list }} {{ "abc".find("", 2, 1) }} {{ "abc".count("", 2, 1) }} {{ "abc".startswith("", 2, 1) }} {{ "abc".find("", 3, 3) }}
{{ "ab" is in "xaby" }} {{ 1 // 0.1 }} {{ 1 % 0.1 }} {{ -7.5 // 2 }} {{ -7.5 % 2 }} {{ 7.5 % -2 }} {{ -0.0 // 1 }} {{ true is number }} {{ 1 ** 9000000000000000000 }} {{ (-1) ** 9000000000000000001 }} {{ 3 ** 39 }}
{% for m in messages if m.content is string %}{% set c = m.content %}
{{ [c.upper(), c.lower(), c.title(), c|title, c|capitalize, c.swapcase(), c.strip(), c.split(), c.rsplit(None, 1), c.splitlines(), c.isalpha(), c.istitle(), c.find('a', 1), c|wordcount, c|indent(2, true)] }}
{% endfor %}
{{ [3, 1, 2, 1]|sort(true) }}
{{ ['b', 'B', 'a', 'A']|sort }}
{{ ['b', 'B', 'a', 'A']|sort(reverse=true) }}
{{ ['b', 'B', 'a', 'A']|sort(false, true) }}
{{ [{'n': 2, 'm': 'x'}, {'n': 1, 'm': 'y'}, {'n': 2, 'm': 'a'}]|sort(attribute='n,m') }}
{{ [{'u': {'n': 'B'}}, {'u': {'n': 'a'}}]|sort(attribute='u.n')|map(attribute='u.n')|list }}
{{ [[2, 'b'], [1, 'c']]|sort(attribute='0') }}
{{ ['a', 'B', 'b', 'A']|unique|list }}
{{ ['a', 'B', 'b', 'A']|unique(true)|list }}
{{ [{'r': 'user'}, {'r': 'USER'}, {'r': 'bot'}]|unique(attribute='r')|list }}
{{ {'B': 1, 'a': 2, 'c': 0}|dictsort }}
{{ {'B': 1, 'a': 2, 'c': 0}|dictsort(true) }}
{{ {'B': 1, 'a': 2, 'c': 0}|dictsort(false, 'value', true) }}
{% for k, v in {'b': 1, 'a': 2}|dictsort %}{{ k }}{{ v }}{% endfor %}
{{ ['B', 'a', 'C']|min }} {{ ['B', 'a', 'C']|max }} {{ ['B', 'a', 'C']|max(true) }}
{{ []|max }}|{{ []|min is undefined }}
{{ [{'x': 2}, {'x': 5}, {'x': 5}]|max(attribute='x') }}
{{ 1234.5|round(-2) }} {{ 1250|round(-2) }} {{ 2.675|round(2) }} {{ -0.5|round }} {{ 0.125|round(2) }} {{ 7|round(0, 'ceil') }} {{ -2.5|round(0, 'floor') }}
{{ [1, 2]|sum(start=0.5) }} {{ [[1], [2]]|sum(start=[]) }} {{ []|sum }}
{{ [1, 2, 3, 4, 5]|batch(2, 'x')|list }} {{ [1, 2, 3, 4, 5]|batch(3)|list }} {{ []|batch(2)|list }}
{{ [1, 2, 3, 4, 5]|slice(3)|list }} {{ [1, 2, 3, 4, 5]|slice(3, 0)|list }} {{ [1, 2]|slice(4, 'f')|list }}
{{ "a\r\nb\rc\u2028d"|indent(3) }}
{{ ""|indent(2, true, true) }}|{{ "x\n"|indent(2) }}|{{ "x\n\n"|indent(2, blank=true) }}
{{ "\nx"|indent }}
{{ ['a b', ' c ']|map('replace', ' ', '_')|list }} {{ [1.26, 2.5]|map('round', 1)|list }} {{ ['x']|map('default', 'y')|list }}
{{ ['a', 'b']|map('upper')|join }}
{% for i in range(2) %}{% for j in range(2) %}{% macro m(k) %}{{ i }}{{ j }}{{ k }}{% endmacro %}{{ m(9) }} {% endfor %}{% endfor %}
{% set x = 1 %}{% macro g() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ g() }}
{% for i in [1] %}{% set y = 5 %}{% macro h() %}{{ y }}{{ i }}{% endmacro %}{{ h() }}{% endfor %}
{{ (1, 2) }} {{ (1,) }} {{ () }} {{ (1, 'a') == (1, 'a') }} {{ (1, 2) == [1, 2] }} {{ ('a', 'b')|join('-') }} {{ 'a' in ('a', 'b') }}
{{ (1, 2)|tojson }} {{ {'a': 1}.items()|list|tojson }}
{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}
{{ 1 < 2 not in [2] }} {{ 'a' in 'abc' in ['abc'] }} {{ 1 == 1.0 != 2 }} {{ 2 > 1 == true }}
{{ -1 ~ 2 }} {{ 2 ** 2 ~ 'x' }} {{ 'a' ~ 'b' * 2 }} {{ 10 - 2 ~ '' if false else 'z' }}
{{ 'x'|float }} {{ ' 1e3 '|float }} {{ 'nan'|float }} {{ 'x'|float(1.5) }} {{ true|float }}
{{ 'ab cd_e f-g'|wordcount }} {{ 'héllo wörld 12'|wordcount }} {{ ''|wordcount }}
{{ 'ab'|center(7) }}|{{ 3|center(4) }}|
{{ '<a href="x">&\'</a>'|e }}
{{ 'A' is upper }} {{ 'Ab' is upper }} {{ '1' is lower }} {{ 'sort' is filter }} {{ 'casefold' is filter }} {{ 'lower' is test }} {{ 3 is filter }} {{ 'in' is test }}
{{ [1, 2, 3]|select('>', 1)|list }} {{ [1, 2, 3]|reject('<=', 2)|list }} {{ [1, 2, 3]|select('ge', 2)|list }}
{{ 'abc'.find('') }} {{ 'abc'.find('', 3) }} {{ 'abc'.find('', 4) }} {{ 'abc'.count('') }} {{ 'abc'.count('', 1) }} {{ 'héé'.rfind('é') }} {{ 'héé'.index('é', 2) }}
{{ 'abc'.startswith('', 3) }} {{ 'abc'.startswith('', 4) }} {{ 'abc'.endswith('b', 0, 2) }} {{ 'abc'.startswith('c', -1) }}
{{ 'a\u00a0b'.split('\u00a0') }} {{ '  a  b  '.rsplit(None, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a,b,c'.rsplit(',') }} {{ ''.split() }} {{ ''.split(',') }} {{ ''.rsplit(',') }}
{{ 'x'.ljust(4, '→') }} {{ '-5'.zfill(4) }} {{ '+'.zfill(3) }} {{ 'ab'.center(5, '.') }} {{ 'ab'.center(6, '.') }} {{ 'abc'.center(6) }}|
{{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }} {{ 'abc'.rpartition('x') }}
{{ '\101\x42\u0043\U00000044' }} {{ 'a\
b' }} {{ '\q' }}
{{ 'ǈ'.istitle() }} {{ 'Ab Cd'.istitle() }} {{ 'AB'.istitle() }} {{ ''.isspace() }} {{ '²'.isdigit() }} {{ '²'.isdecimal() }} {{ '½'.isnumeric() }}
{{ 'abc'.replace('', '-', 2) }} {{ ''.replace('', 'x') }}
{{ [1, 2][0:5:-1] }} {{ 'abc'|reverse }}
"""

TEMPLATES = {"chatml_thinking": CHATML_THINKING, "llama3_headers": LLAMA3_HEADERS, "gemma_turns": GEMMA_TURNS,
             "kitchen_sink": KITCHEN_SINK, "python_semantics": PYTHON_SEMANTICS}

CONVERSATIONS = [
    [{"role": "user", "content": "Hi there!"}],
    [{"role": "system", "content": "  You are terse.  "}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}],
    [{"role": "user", "content": "Tell me a joke"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nNo."},
     {"role": "user", "content": "Again, héllo ünïcode \"quoted\" 'single'"},
     {"role": "assistant", "content": "Why did the chicken\ncross the road?", "reasoning_content": "think more"}],
    [{"role": "system", "content": "sys"}, {"role": "user", "content": "call a tool"},
     {"role": "assistant", "content": "calling"}, {"role": "tool", "content": "result 1"},
     {"role": "tool", "content": "result 2"}, {"role": "assistant", "content": "done"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],  # Gemma refuses: no alternation
    [{"role": "system", "content": [{"type": "text", "text": "typed system"}]},
     {"role": "user", "content": [{"type": "text", "text": " typed user "}, {"type": "image"}]}],
    [{"role": "user", "content": "\u00a0ΣΑΣ straße İstanbul ǆemal\u2003they're 1st\u2028ﬁne\u00a0"},
     {"role": "assistant", "content": "ΌΣΟΣ Σ. ΑΣ'Σ a\r\nb\x85c"}],
]

VARS = [
    {"bos_token": '"<s>"', "eos_token": '"</s>"'},
    {"bos_token": '"<|begin_of_text|>"', "eos_token": '"<|eot_id|>"', "date_string": '"01 Jan 2026"',
     "enable_thinking": "false"},
]


def cases():
    """Every template with every conversation, with and without the generation prompt, under each set of
    variables: dicts of template, messages, add_generation_prompt and vars (name: JSON text)."""
    out = []
    for name, template in TEMPLATES.items():
        for messages in CONVERSATIONS:
            for gen in (False, True):
                for vars_ in VARS:
                    out.append({"name": name, "template": template, "messages": messages,
                                "add_generation_prompt": gen, "vars": vars_})
    return out


# Conversations as SFT data holds them, for models' own templates (chat_template_check.py --templates):
# tool definitions, assistant tool calls (arguments as a dict and as JSON text), tool results,
# reasoning, typed content parts, a system turn, several turns.
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
REAL_CONVERSATIONS = [
    ({}, [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi! How can I help?"}]),
    ({}, [{"role": "system", "content": "You are a careful assistant."},
          {"role": "user", "content": "Name a prime above 10."}, {"role": "assistant", "content": "11."},
          {"role": "user", "content": "And one above 100, with ünïcode ✓?"},
          {"role": "assistant", "content": "101 ✓"}]),
    ({}, [{"role": "user", "content": "What is 7 × 6?"},
          {"role": "assistant", "content": "<think>\n7 × 6 = 42\n</think>\n\n42"},
          {"role": "user", "content": "And 8 × 6?"},
          {"role": "assistant", "content": "48", "reasoning_content": "8 × 6 = 48"}]),
    ({"tools": [WEATHER_TOOL]},
     [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "",
       "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
      {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21}"},
      {"role": "assistant", "content": "It is 21 °C in Paris."}]),
    ({"tools": [WEATHER_TOOL]},
     [{"role": "system", "content": "Use tools when needed."}, {"role": "user", "content": "Weather in Oslo and Rome?"},
      {"role": "assistant", "content": "Checking both.",
       "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
                      {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
      {"role": "tool", "content": "cold"}, {"role": "tool", "content": "warm"},
      {"role": "assistant", "content": "Oslo is cold, Rome warm."}]),
    ({}, [{"role": "user", "content": [{"type": "text", "text": "Describe this."}]},
          {"role": "assistant", "content": [{"type": "text", "text": "A plain text part."}]}]),
    ({"enable_thinking": False}, [{"role": "user", "content": "Quick answer: 2+2?"}, {"role": "assistant", "content": "4"}]),
]
REAL_VARS = {"bos_token": '"<s>"', "eos_token": '"</s>"', "date_string": '"26 Jul 2024"'}


def real_cases(folder):
    """Every .jinja in folder on every REAL_CONVERSATIONS entry, the whole conversation and its prompt
    (up to the last assistant turn, with the generation prompt), as the fixture's cases."""
    import glob
    import json
    import os
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            template = f.read()
        name = os.path.basename(path)[:-len(".jinja")]
        for extra, messages in REAL_CONVERSATIONS:
            vars_ = dict(REAL_VARS)
            vars_.update({k: json.dumps(v) for k, v in extra.items()})
            last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
            for msgs, gen in ((messages, False), (messages[:last], True)):
                out.append({"name": name, "template": template, "messages": msgs, "add_generation_prompt": gen,
                            "vars": vars_})
    return out
