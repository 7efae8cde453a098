"""AllenAI OLMo 3 Think: `<think>` … `</think>`, the template opening the block.

vLLM's `olmo3` splits at `</think>` with or without `<think>` before it and calls text with no
marker content, so the start is undecided where the prompt shows none; OLMo 3 Think's template
opens the block, and the prompt then says so. Its tokenizer is not told apart from Qwen3's
(detection gives `qwen3`, the same split); name it to have the name on the Result.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("olmo3")
class Olmo3Format(ThinkTagFormat):
    starts_in_thinking = None
