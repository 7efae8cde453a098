"""Google Gemma 4: `<|channel>thought\\n…<channel|>`, the answer after it.

The thinking block is a channel: its opener is followed by the role label `thought`, which is
not thinking (vLLM strips it too). Thinking is switched on by `enable_thinking`; where the
prompt shows no marker the start is undecided, as for Qwen3 (vLLM's `gemma4` splits at a lone
`<channel|>`). A `<|tool_call>` inside the thinking ends it.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("gemma4")
class Gemma4Format(ThinkTagFormat):
    think_start, think_end = "<|channel>", "<channel|>"
    more_think_starts = ("<|channel>thought",)  # the opener with its role label
    tool_call_starts = ("<|tool_call>",)
    starts_in_thinking = None
    signature = ("<|channel>", "<channel|>")
    detect_priority = 10
