"""DeepSeek-V3.1 / V3.2: one model, thinking switched by the template's `thinking` kwarg.

With `chat_template_kwargs={"thinking": true}` the template ends the prompt with `<think>`: the
R1 split. Without it (the default) the prompt ends with `</think>` and everything is content,
as vLLM's `deepseek_v3` hands such a request to its identity parser. With no prompt to look
at, thinking is off, as it is by default.
"""

from __future__ import annotations

import re

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat

_THINKING_SWITCH = re.compile(r"\bif\s+(?:not\s+)?thinking\b")


@register_format("deepseek_v3", aliases=("deepseek_v31", "deepseek_v32"))
class DeepSeekV3Format(ThinkTagFormat):
    starts_in_thinking = False
    signature = ("<think>", "</think>", "<｜Assistant｜>")
    detect_priority = 6  # before deepseek_r1: the same markers, a template with a switch

    @classmethod
    def matches(cls, tokens: set[str], template: str) -> bool:
        return super().matches(tokens, template) and bool(_THINKING_SWITCH.search(template))
