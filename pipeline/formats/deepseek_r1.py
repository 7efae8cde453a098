"""DeepSeek-R1 (and its distills): the chat template opens the thinking.

The template ends the generation prompt with `<think>\\n`, so the model never writes the start
marker; without a prompt to look at, the generation is taken to start inside thinking too. A
`<think>` the model writes anyway is dropped; with no `</think>` ever, everything is reasoning
and the content is "" (vLLM's behaviour for R1).
"""

from __future__ import annotations

from pipeline.formats.detect import opens_thinking
from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("deepseek_r1")
class DeepSeekR1Format(ThinkTagFormat):
    starts_in_thinking = True
    signature = ("<think>", "</think>")
    detect_priority = 1  # before qwen3, which has the same markers

    @classmethod
    def matches(cls, tokens: set[str], template: str) -> bool:
        return super().matches(tokens, template) and opens_thinking(template)
