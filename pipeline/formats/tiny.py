"""The bundled tiny reasoner (docs/step-format.md): one step per line, then `Answer: <value>`.

No markers: the OpenAI `content` is the answer line, the `reasoning` the steps before it
(`answer_lines.py`). Its answers are raw line values, as its scorer reads them
(`x = 4, y = 7`, `7/2`), so none of the generic answer styles apply.
"""

from __future__ import annotations

from pipeline.formats import answer_lines
from pipeline.formats.base import ReasoningFormat
from pipeline.formats.registry import register_format
from pipeline.formats.split import Split, StreamSplitter


@register_format("tiny")
class TinyFormat(ReasoningFormat):
    step_delimiter = "\n"
    answer_prefix = "Answer:"
    probe_text = "Answer:"

    def split(self, text: str, prompt: str = "") -> Split:
        return answer_lines.split_answer_lines(text)

    def splitter(self, prompt: str = "") -> StreamSplitter:
        return answer_lines.AnswerLineSplitter()

    def find_answer(self, text: str, prompt: str = "") -> str | None:
        return answer_lines.last_answer(text)

    def probe_answer(self, probe_output: str) -> str | None:
        # The probe writes the rest of the answer line (it stops at the step delimiter).
        value = probe_output.split("\n", 1)[0].strip()
        return value or None

    def is_answer_step(self, step: str, after_thinking: bool) -> bool:
        return answer_lines.is_answer_line(step.strip("\n"))
