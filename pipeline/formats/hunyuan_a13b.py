"""Tencent Hunyuan-A13B: `<think>\\n…\\n</think>\\n<answer>\\n…\\n</answer>`.

vLLM's `hunyuan_a13b` (SGLang's `hunyuan`) switches to the answer only on the whole
`</think>\\n<answer>` sequence, so that is the end marker here: a `</think>` the model goes on
thinking after stays in the thinking. `</answer>` (and a stray `<answer>`) leave the content.
The model writes `<think>` itself; without it everything is content.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("hunyuan_a13b", aliases=("hunyuan",))
class HunyuanA13BFormat(ThinkTagFormat):
    think_start, think_end = "<think>", "</think>\n<answer>"
    content_wrappers = ("<answer>", "</answer>")
    starts_in_thinking = False
    force_close = "\n</think>\n<answer>\n"
    signature = ("<think>", "</think>", "<answer>", "</answer>")
    detect_priority = 5
