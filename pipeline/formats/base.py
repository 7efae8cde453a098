"""`ReasoningFormat`: how one model family writes its reasoning (markers, steps, answers).

One instance answers every format question the pipeline asks: the OpenAI split of a text (whole
or streamed), whether the generation is inside an open thinking block, what to append to force
an answer or to probe for one, and where the final answer is. A built-in is a small subclass
that sets the class attributes and overrides what differs (`registry.register_format`).

This base class is the marker-driven behaviour: with `think_start`/`think_end` set, text inside
the markers is reasoning and text outside is content (`markers.py`); with no markers everything
is content (what an OpenAI server does for a model it has no reasoning parser for).
"""

from __future__ import annotations

from typing import ClassVar

from pipeline.formats import answers
from pipeline.formats.markers import Markers, MarkerSplitter, markers, split_markers
from pipeline.formats.split import Split, StreamSplitter, TwoPartSplitter


class ReasoningFormat:
    name: ClassVar[str] = ""  # set by register_format
    think_start: ClassVar[str | None] = None
    think_end: ClassVar[str | None] = None
    # Where the prompt shows no marker: does the generation begin inside thinking? (DeepSeek-R1:
    # yes, its template opens the block; Qwen3: no, the model writes `<think>` itself.)
    starts_in_thinking: ClassVar[bool] = False
    step_delimiter: ClassVar[str] = "\n\n"
    answer_prefix: ClassVar[str] = "\n\nThe answer is "
    probe_text: ClassVar[str] = "\n\nThe answer is"
    answer_max_tokens: ClassVar[int] = 24

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A half-defined format would split wrongly without a word: fail at class creation.
        if (cls.think_start is None) != (cls.think_end is None):
            raise TypeError(f"{cls.__name__}: set both think_start and think_end, or neither")
        if cls.think_start is not None:
            Markers(cls.think_start, cls.think_end or "")  # validates the pair
        if not cls.step_delimiter:
            raise TypeError(f"{cls.__name__}: step_delimiter must not be empty")
        if cls.answer_max_tokens < 1:
            raise TypeError(f"{cls.__name__}: answer_max_tokens must be >= 1")

    def __repr__(self) -> str:
        return f"<ReasoningFormat {self.name or type(self).__name__}>"

    # --- markers and thinking state ----------------------------------------------------------

    @property
    def markers(self) -> Markers | None:
        if self.think_start is None or self.think_end is None:
            return None
        return markers(self.think_start, self.think_end)

    def thinking_at_start(self, prompt: str = "") -> bool:
        """Does the generation begin inside thinking? The prompt's last marker decides (a
        template that opened the block, or `<think>\\n\\n</think>` for thinking off); with none,
        `starts_in_thinking`."""
        m = self.markers
        if m is None:
            return False
        return m.state_after(prompt, self.starts_in_thinking)

    def in_thinking(self, text: str, prompt: str = "") -> bool:
        """Is the generation (`text` so far) inside an open thinking block? Always False for a
        format without markers (it has no blocks; `is_answer_step` tells an answering model)."""
        m = self.markers
        if m is None:
            return False
        return m.state_after(text, self.thinking_at_start(prompt))

    def strip_markers(self, text: str) -> str:
        m = self.markers
        return text if m is None else m.strip(text)

    # --- the OpenAI split --------------------------------------------------------------------

    def split(self, text: str, prompt: str = "") -> Split:
        """The reasoning and content of a whole generation (`prompt`: the rendered prompt)."""
        m = self.markers
        if m is None:
            return Split("", text.strip())
        return split_markers(text, m, self.thinking_at_start(prompt))

    def splitter(self, prompt: str = "") -> StreamSplitter:
        """A streaming split whose deltas add up to `split(text, prompt)`."""
        m = self.markers
        if m is None:
            return _ContentSplitter()
        return MarkerSplitter(m, self.thinking_at_start(prompt))

    # --- answers -----------------------------------------------------------------------------

    def find_answer(self, text: str, prompt: str = "") -> str | None:
        """The final answer of a whole completion: the content's last answer, else the
        thinking's (a model that answered in its thinking and then stopped)."""
        parts = self.split(text, prompt)
        return answers.find_answer(parts.content) or answers.find_answer(parts.reasoning)

    @property
    def boxes_answer(self) -> bool:
        """Does the format write its final answer in `\\boxed{}` (its answer prefix opens one)?"""
        return self.answer_prefix.rstrip().endswith("{")

    def well_formed(self, text: str, prompt: str = "") -> bool:
        """Is the completion in the format: its thinking closed (with markers) and an answer
        stated after it (for `\\boxed{` formats, a closed box)?"""
        if self.in_thinking(text, prompt):
            return False
        found = answers.find_all(self.split(text, prompt).content)
        if self.boxes_answer:
            return any(f.style == answers.BOXED for f in found)
        return bool(found)

    def probe_answer(self, probe_output: str) -> str | None:
        """The answer in the text generated right after `probe_text`, or None."""
        if self.probe_text.rstrip().endswith("{"):  # `\boxed{`: the answer runs to its `}`
            return answers.until_closing_brace(probe_output)
        return answers.answer_after(self.probe_text, probe_output)

    def is_answer_step(self, step: str, after_thinking: bool) -> bool:
        """Does this step state the final answer? With markers: any step after the thinking
        closed (or the one closing it) is the answer being written; without: a step stating
        an answer."""
        if self.think_end is not None:
            return after_thinking or self.think_end in step
        return answers.has_answer(step)

    # --- forcing -----------------------------------------------------------------------------

    def force_text(self, text: str, prompt: str = "") -> str:
        """What to append when the budget is spent: close the thinking if it is open, then
        `answer_prefix`, separated from `text` by one step delimiter (none added where `text`
        already ends with it)."""
        if self.think_end is not None and self.in_thinking(text, prompt):
            close = _separator(text, "\n") + self.think_end + "\n\n"
            return close + self.answer_prefix.lstrip("\n")
        prefix = self.answer_prefix
        body = prefix.lstrip("\n")
        sep = prefix[: len(prefix) - len(body)] or self.step_delimiter
        return _separator(text, sep) + body


def _separator(text: str, sep: str) -> str:
    """The part of `sep` that `text` does not already end with ("" for an empty text)."""
    if not text:
        return ""
    for k in range(len(sep), 0, -1):
        if text.endswith(sep[:k]):
            return sep[k:]
    return sep


class _ContentSplitter(TwoPartSplitter):
    """No markers: everything is content (stripped, like the whole-text split)."""

    def feed(self, delta: str) -> Split:
        self._emit(False, delta)
        return self._take()

    def flush(self) -> Split:
        return self._close()
