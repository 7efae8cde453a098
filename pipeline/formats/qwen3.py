"""Qwen3: the model writes `<think>` itself.

Text before any marker, with no open marker in the prompt, is content: that is Qwen3 with
`enable_thinking=False`, whose template already wrote `<think>\\n\\n</think>\\n\\n` into the
prompt. Templates that open the block in the prompt (Qwen3 2507 Thinking, Qwen3.5) are followed
too: the prompt's last marker decides where the generation starts.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("qwen3")
class Qwen3Format(ThinkTagFormat):
    starts_in_thinking = False
