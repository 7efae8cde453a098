"""ByteDance Seed-OSS: `<seed:think>` … `</seed:think>`.

Like R1, text before the end marker is thinking with or without the start marker, and with no
end marker everything is thinking (vLLM's `seed_oss`); `<seed:tool_call>` ends the thinking.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("seed_oss")
class SeedOssFormat(ThinkTagFormat):
    think_start, think_end = "<seed:think>", "</seed:think>"
    tool_call_starts = ("<seed:tool_call>",)
    starts_in_thinking = True
    signature = ("<seed:think>", "</seed:think>")
    detect_priority = 10
