"""Mistral's reasoning models (Magistral): `[THINK]` … `[/THINK]`, control tokens of its tokenizer.

vLLM's `mistral` parser: text before `[/THINK]` is thinking whether or not the model wrote
`[THINK]` (its system prompt asks it to think first); with no `[/THINK]` everything is
thinking. `[TOOL_CALLS]` inside the thinking ends it.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("mistral", aliases=("magistral",))
class MistralFormat(ThinkTagFormat):
    think_start, think_end = "[THINK]", "[/THINK]"
    tool_call_starts = ("[TOOL_CALLS]",)
    starts_in_thinking = True
    signature = ("[THINK]", "[/THINK]")
    detect_priority = 10
