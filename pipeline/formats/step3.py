"""StepFun Step-3: the model writes only `</think>`; everything before it is thinking.

vLLM's `step3`: like R1, with no `</think>` yet everything is thinking. Its tokenizer is not
told apart from R1's by detection (which gives `deepseek_r1`, the same split when the template
opens the block); name it to have the name on the Result.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("step3")
class Step3Format(ThinkTagFormat):
    starts_in_thinking = True
