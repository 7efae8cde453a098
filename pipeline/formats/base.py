"""`ReasoningFormat`: how one model family writes its reasoning (markers, steps, answers).

One instance answers every format question the pipeline asks: the OpenAI split of a text (whole
or streamed), whether the generation is inside an open thinking block, what to append to force
an answer or to probe for one, and where the final answer is. A built-in is a small subclass
that sets the class attributes and overrides what differs (`registry.register_format`).

This base class is the marker-driven behaviour (`markers.py`): with `think_start`/`think_end`
set, text inside the markers is reasoning and text outside is content; with no markers
everything is content (what an OpenAI server does for a model it has no reasoning parser for).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pipeline.formats import answers
from pipeline.formats.markers import (
    CONTENT,
    THINKING,
    UNDECIDED,
    MarkerGrammar,
    MarkerSplitter,
    grammar,
    scan,
    start_state,
    strip_all,
)
from pipeline.formats.split import ContentSplitter, Split, StreamSplitter


class ReasoningFormat:
    name: ClassVar[str] = ""  # set by register_format
    aliases: ClassVar[tuple[str, ...]] = ()  # set by register_format (vLLM's, SGLang's names)
    think_start: ClassVar[str | None] = None  # the marker forcing writes, and its pair
    think_end: ClassVar[str | None] = None
    # Other spellings the model uses (Granite: "Here's my thought process:").
    more_think_starts: ClassVar[tuple[str, ...]] = ()
    more_think_ends: ClassVar[tuple[str, ...]] = ()
    # Openers of a tool call: one inside the thinking ends it, the call going to the content.
    tool_call_starts: ClassVar[tuple[str, ...]] = ()
    # Wrappers of the content (ERNIE's `<response>`): removed from it.
    content_wrappers: ClassVar[tuple[str, ...]] = ()
    # Where the prompt shows no marker, does the generation begin inside thinking? True:
    # DeepSeek-R1 (its template opens the block); False: no (DeepSeek-V3.1 with thinking off);
    # None: undecided, as Qwen3: the model writes `<think>` itself, but a lone `</think>` shows
    # that the template had opened the block (markers.py).
    starts_in_thinking: ClassVar[bool | None] = False
    # What forcing writes to close an open thinking block (None: "\n" + think_end + "\n\n").
    force_close: ClassVar[str | None] = None
    step_delimiter: ClassVar[str] = "\n\n"
    answer_prefix: ClassVar[str] = "\n\nThe answer is "
    probe_text: ClassVar[str] = "\n\nThe answer is"
    answer_max_tokens: ClassVar[int] = 24
    # Detection (detect.py): strings that mark the family in a tokenizer's tokens or its chat
    # template, every one required; formats are tried by `detect_priority`, highest first.
    signature: ClassVar[tuple[str, ...]] = ()
    detect_priority: ClassVar[int] = 0

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A half-defined format would split wrongly without a word: fail at class creation.
        if (cls.think_start is None) != (cls.think_end is None):
            raise TypeError(f"{cls.__name__}: set both think_start and think_end, or neither")
        if cls.think_start is not None:
            cls._grammar()  # validates the markers
        if not cls.step_delimiter:
            raise TypeError(f"{cls.__name__}: step_delimiter must not be empty")
        if cls.answer_max_tokens < 1:
            raise TypeError(f"{cls.__name__}: answer_max_tokens must be >= 1")

    @classmethod
    def _grammar(cls) -> MarkerGrammar:
        return grammar(
            (cls.think_start or "", *cls.more_think_starts),
            (cls.think_end or "", *cls.more_think_ends),
            cls.tool_call_starts,
            cls.content_wrappers,
        )

    @classmethod
    def matches(cls, tokens: set[str], template: str) -> bool:
        """Is a tokenizer with these tokens and this chat template of this family?"""
        return bool(cls.signature) and all(s in tokens or s in template for s in cls.signature)

    def __repr__(self) -> str:
        return f"<ReasoningFormat {self.name or type(self).__name__}>"

    # --- markers and thinking state ----------------------------------------------------------

    @property
    def markers(self) -> MarkerGrammar | None:
        return None if self.think_start is None else self._grammar()

    def _default_state(self) -> str:
        if self.starts_in_thinking is None:
            return UNDECIDED
        return THINKING if self.starts_in_thinking else CONTENT

    def start_state(self, prompt: str = "") -> str:
        """Where the generation begins: `thinking`, `content` or `undecided` (markers.py). The
        prompt's last marker decides (a template that opened the block, or wrote a closed one
        for thinking off); with none, `starts_in_thinking`."""
        m = self.markers
        if m is None:
            return CONTENT
        return start_state(prompt, m, self._default_state())

    def thinking_at_start(self, prompt: str = "") -> bool:
        """Does the generation begin inside an open thinking block?"""
        return self.start_state(prompt) == THINKING

    def thinking_state(self, text: str, prompt: str = "") -> str:
        """The state after `text`: `thinking`, `content`, or `undecided` (no marker yet, where
        the format cannot tell; vLLM's "reasoning not ended" too)."""
        m = self.markers
        if m is None:
            return CONTENT
        return scan(text, m, self.start_state(prompt))[1]

    def in_thinking(self, text: str, prompt: str = "") -> bool:
        """Is the generation (`text` so far) inside an open thinking block? Always False for a
        format without markers (it has no blocks; `is_answer_step` tells an answering model)."""
        return self.thinking_state(text, prompt) == THINKING

    def strip_markers(self, text: str) -> str:
        m = self.markers
        return text if m is None else strip_all(text, m)

    def count_reasoning_tokens(self, pieces: Iterable[str], prompt: str = "") -> int | None:
        """How many of a generation's tokens (their texts, in order) are thinking: those read
        while the thinking is open, its end marker with them (vLLM counts alike). None for a
        format without markers, whose split only the text after a token decides."""
        m = self.markers
        if m is None:
            return None
        splitter = MarkerSplitter(m, self.start_state(prompt))
        count = undecided = 0
        for piece in pieces:
            before = splitter.state
            splitter.feed(piece)
            if before == UNDECIDED:
                undecided += 1
                if splitter.state != UNDECIDED:  # decided: thinking if it ended in content
                    count += undecided if splitter.state == CONTENT else 0
                    undecided = 0
            else:
                count += before == THINKING
        return count

    def marker_texts(self) -> tuple[str, ...]:
        """Every marker string the format reads: decoding must keep them, special or not."""
        m = self.markers
        return () if m is None else m.lexicon.markers

    # --- the OpenAI split --------------------------------------------------------------------

    def split(self, text: str, prompt: str = "") -> Split:
        """The reasoning and content of a whole generation (`prompt`: the rendered prompt)."""
        m = self.markers
        if m is None:
            return Split("", text.strip())
        return scan(text, m, self.start_state(prompt))[0]

    def splitter(self, prompt: str = "") -> StreamSplitter:
        """A streaming split whose deltas add up to `split(text, prompt)`."""
        m = self.markers
        if m is None:
            return ContentSplitter()
        return MarkerSplitter(m, self.start_state(prompt))

    # --- answers -----------------------------------------------------------------------------

    def find_answer(self, text: str, prompt: str = "") -> str | None:
        """The final answer of a whole completion: the content's last answer, else the
        thinking's (a model that answered in its thinking and then stopped)."""
        return self.answer_in(self.split(text, prompt))

    @staticmethod
    def answer_in(parts: Split) -> str | None:
        """The content's last answer, else the thinking's."""
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
        m = self.markers
        if m is not None:
            closing = m.ends + m.tool_calls
            return after_thinking or any(marker in step for marker in closing)
        return answers.has_answer(step)

    # --- forcing -----------------------------------------------------------------------------

    def force_text(self, text: str, prompt: str = "") -> str:
        """What to append when the budget is spent: close the thinking if it is open, then
        `answer_prefix`, separated from `text` by one step delimiter (none added where `text`
        already ends with it)."""
        if self.think_end is not None and self.in_thinking(text, prompt):
            close = self.force_close or f"\n{self.think_end}\n\n"
            return _appended(text, close) + self.answer_prefix.lstrip("\n")
        return _appended(text, self.answer_prefix, self.step_delimiter)


def _appended(text: str, piece: str, sep: str = "") -> str:
    """`piece` as appended to `text`: its leading newlines (or `sep`, where it has none) only
    as far as `text` does not already end with them."""
    body = piece.lstrip("\n")
    return _separator(text, piece[: len(piece) - len(body)] or sep) + body


def _separator(text: str, sep: str) -> str:
    """The part of `sep` that `text` does not already end with ("" for an empty text)."""
    if not text:
        return ""
    for k in range(len(sep), 0, -1):
        if text.endswith(sep[:k]):
            return sep[k:]
    return sep
