"""`ThinkTagFormat`: the `<think>` … `</think>` family (DeepSeek-R1, Qwen3, their distills).

Reasoning in paragraphs, the final answer boxed (the R1 paper's and Qwen3's math prompt
convention). Subclasses differ in where the generation starts when the prompt has no marker.
"""

from __future__ import annotations

from pipeline.formats.base import ReasoningFormat


class ThinkTagFormat(ReasoningFormat):
    think_start = "<think>"
    think_end = "</think>"
    step_delimiter = "\n\n"
    answer_prefix = "The answer is \\boxed{"
    # Dynasor's early-exit probe: inside the thinking, a sentence that commits to an answer
    # and opens the box, so the answer is everything up to the matching brace.
    probe_text = "\n\n... I now know the final answer. The answer is \\boxed{"
