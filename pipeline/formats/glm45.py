"""GLM-4.5 / 4.6 and GLM-4.7 (Zhipu): `<think>` … `</think>`; a `<tool_call>` inside the thinking
ends it; `enable_thinking=False` renders `<think></think>` into the prompt.

`glm45` (vLLM's, also `glm4_moe`) is as Qwen3: the model writes `<think>` after `<|assistant|>`,
so the start is undecided where the prompt shows no marker. Told apart from Qwen3 by its
`[gMASK]` prompt prefix. `glm47`: GLM-4.7's template opens `<think>` in the generation prompt,
so the output starts in the thinking (vLLM's `glm47`: R1's semantics, its tests' case
`no_content_token`); with the prompt both split alike, so detection names `glm45` and `glm47`
is chosen by name.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("glm45", aliases=("glm4_moe",))
class Glm45Format(ThinkTagFormat):
    starts_in_thinking = None
    tool_call_starts = ("<tool_call>",)
    signature = ("<think>", "</think>", "[gMASK]")
    detect_priority = 5


@register_format("glm47")
class Glm47Format(Glm45Format):
    starts_in_thinking = True
    signature = ()  # its tokens are GLM-4.5's: chosen by name
