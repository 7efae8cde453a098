"""Models without thinking markers that reason in paragraphs (SmolLM2 and other chat models).

The split is `paragraphs.py`'s: content from the last paragraph that states an answer (boxed,
"the answer is …", `Answer:`, `####`) to the end, or the last paragraph when none does;
reasoning the paragraphs before. Answers are stated in words, not boxed.
"""

from __future__ import annotations

from pipeline.formats import answers, paragraphs
from pipeline.formats.base import ReasoningFormat
from pipeline.formats.registry import register_format
from pipeline.formats.split import Split, StreamSplitter


@register_format("plain")
class PlainFormat(ReasoningFormat):
    step_delimiter = "\n\n"
    answer_prefix = "\n\nThe answer is "
    probe_text = "\n\nThe answer is"

    def split(self, text: str, prompt: str = "") -> Split:
        return paragraphs.split_paragraphs(text, answers.has_answer)

    def splitter(self, prompt: str = "") -> StreamSplitter:
        return paragraphs.ParagraphSplitter(answers.has_answer)
