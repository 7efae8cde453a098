"""Qwen3: the model writes `<think>` itself, or its template opens the block.

Where the prompt shows no marker, the start is undecided (markers.py): text before `<think>` is
content, text before a lone `</think>` was thinking (vLLM's Qwen3 parser splits there: the
template of Qwen3 2507 Thinking and Qwen3.5 opened the block), text with no marker is content.
Qwen3 with `enable_thinking=False` has `<think>\\n\\n</think>\\n\\n` at the prompt's end: all
content. A `<tool_call>` inside the thinking ends it; the call is content.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


# SGLang's `qwen3-thinking` is Qwen3 with a template that opens the block: the prompt says so.
@register_format("qwen3", aliases=("qwen3_thinking",))
class Qwen3Format(ThinkTagFormat):
    starts_in_thinking = None
    tool_call_starts = ("<tool_call>",)
    signature = ("<think>", "</think>")
