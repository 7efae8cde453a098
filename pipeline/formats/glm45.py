"""GLM-4.5 / 4.6 / 4.7 (Zhipu): `<think>` … `</think>` written by the model after `<|assistant|>`.

As Qwen3 (vLLM's `glm45`, also `glm47`): the start is undecided where the prompt shows no
marker; `enable_thinking=False` renders `<think></think>` into the prompt; a `<tool_call>`
inside the thinking ends it. Told apart from Qwen3 by its `[gMASK]` prompt prefix.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("glm45", aliases=("glm47", "glm4_moe"))
class Glm45Format(ThinkTagFormat):
    starts_in_thinking = None
    tool_call_starts = ("<tool_call>",)
    signature = ("<think>", "</think>", "[gMASK]")
    detect_priority = 5
