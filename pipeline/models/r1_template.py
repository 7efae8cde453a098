"""The R1-style reasoner's chat template: SmolLM2's, plus tools the Qwen / Hermes way.

Without tools and tool turns it renders exactly what SmolLM2's own template renders (a test
holds it to that), so nothing the adapter learned changes. With `tools` the system message lists
them in `<tools></tools>` and says how to call (`<tool_call>{"name": ..., "arguments": ...}
</tool_call>`, the `hermes` parser's syntax); an assistant turn's `tool_calls` are written that
way, and a tool's result comes back as a user turn in `<tool_response>` tags, as Qwen2.5's
template does.
"""

from __future__ import annotations

import hashlib

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

R1_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}"
    "{%- else %}{{- '" + DEFAULT_SYSTEM + "\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": '
    '<function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] == 'system' and tools %}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{%- if loop.first and messages[0]['role'] != 'system' and not tools %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{%- set f = call['function'] if call['function'] is defined else call %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' }}"
    "{%- if f['arguments'] is string %}{{- f['arguments'] }}"
    "{%- else %}{{- f['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

TEMPLATE_SHA = hashlib.sha256(R1_CHAT_TEMPLATE.encode()).hexdigest()[:16]
