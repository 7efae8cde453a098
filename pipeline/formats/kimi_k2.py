"""Kimi K2 Thinking (Moonshot): `<think>` … `</think>`, and a tool section can end the thinking.

The model sometimes opens its tool-call section without closing the thinking first; vLLM's
`kimi_k2` splits there: the thinking before, the section (as written) in the content. Like R1,
text before `</think>` is thinking with or without `<think>`.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat

SECTION = "<|tool_calls_section_begin|>"


@register_format("kimi_k2", aliases=("kimi_k25",))
class KimiK2Format(ThinkTagFormat):
    starts_in_thinking = True
    # The section, its singular spelling, and a call with no section around it.
    tool_call_starts = (SECTION, "<|tool_call_section_begin|>", "<|tool_call_begin|>")
    signature = ("<think>", "</think>", SECTION)
    detect_priority = 5
