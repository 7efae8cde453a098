"""Baidu ERNIE-4.5 Thinking: `…\\n</think>\\n\\n<response>\\n…\\n</response>`.

The template opens the thinking, so text before `</think>` is thinking and, with no
`</think>`, everything is (vLLM's `ernie45`); the content's `<response>` wrapper is removed.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("ernie45")
class Ernie45Format(ThinkTagFormat):
    content_wrappers = ("<response>", "</response>")
    starts_in_thinking = True
    force_close = "\n</think>\n\n<response>\n"
    signature = ("<think>", "</think>", "<response>", "</response>")
    detect_priority = 5
