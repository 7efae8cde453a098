"""OpenAI gpt-oss: the Harmony format, messages on channels rather than a marker pair.

A generation is a run of messages, each `<|start|>{role}` (the template writes the first one's)
`<|channel|>{channel}[ to={recipient}][<|constrain|>{type}]<|message|>{body}` ended by `<|end|>`,
`<|return|>` or `<|call|>`. The `analysis` channel is the thinking; `final`, and `commentary`
with no recipient, are content; a message to a recipient (`to=functions.get_weather`) is a tool
call, which goes to the content as written, headers and all (a tool call ends the thinking).
Headers and the other special tokens are never part of either. The thinking has ended once a
`final` header is complete (vLLM's `is_reasoning_end` for gpt-oss); until then the generation is
in thinking, even before its first header. Forcing closes the analysis message and opens the
final one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pipeline.formats.markers import CONTENT, THINKING, Lexicon
from pipeline.formats.registry import register_format
from pipeline.formats.split import Split, StreamSplitter, TwoPartSplitter
from pipeline.formats.think_tags import ThinkTagFormat

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
ENDS = ("<|end|>", "<|return|>", "<|call|>")
TOKENS = (START, CHANNEL, MESSAGE, CONSTRAIN, *ENDS)
_LEXICON = Lexicon(TOKENS)
_RECIPIENT = re.compile(r"\bto=(\S+)")
_CHANNEL_NAME = re.compile(r"\s*(\w+)")
_HEADERS = re.compile(
    r"<\|start\|>[^<]*|<\|channel\|>[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>|<\|(?:end|return|call)\|>"
)
OUTSIDE, HEADER, BODY = "outside", "header", "body"
OPEN_FINAL = f"{START}assistant{CHANNEL}final{MESSAGE}"


class HarmonySplitter(TwoPartSplitter):
    """Harmony messages to the two parts, delta by delta."""

    def __init__(self, prompt: str = "") -> None:
        super().__init__()
        self.where = OUTSIDE
        self.header = ""  # the current header's text, tokens included
        self._reasoning = False  # the current body's part
        self._raw = False  # a tool call: the message goes to the content as written
        self._pending = ""
        # Where the prompt leaves off (inside the assistant header the template wrote); its
        # own messages are not part of the generation.
        self._quiet = True
        self.feed(prompt)
        self.flush_pending()
        self._quiet = False
        self.thinking = not (self.where == BODY and not self._reasoning)

    def _emit(self, reasoning: bool, text: str) -> None:
        if not self._quiet:
            super()._emit(reasoning, text)

    def _text(self, text: str) -> None:
        if self.where == HEADER:
            self.header += text
        elif text:
            self._emit(self.where == BODY and self._reasoning, text)

    def _close_message(self) -> None:
        self._end_segment(self._reasoning)
        self.where, self._raw, self._reasoning = OUTSIDE, False, False

    def _open_body(self) -> None:
        after = self.header.rsplit(CHANNEL, 1)[-1] if CHANNEL in self.header else ""
        name = _CHANNEL_NAME.match(after)
        channel = name.group(1) if name else ""
        self._raw = _RECIPIENT.search(self.header) is not None
        self._reasoning = channel == "analysis" and not self._raw
        self.thinking = self._reasoning
        self.where = BODY
        if self._raw:
            self._emit(False, self.header + MESSAGE)

    def _token(self, token: str) -> None:
        if self.where == BODY and self._raw and token not in (START, CHANNEL):
            self._emit(False, token)  # a tool call as written
            if token in ENDS:
                self._close_message()
            return
        if token in (START, CHANNEL):
            if self.where == BODY:
                self._close_message()
            if token == START or self.where == OUTSIDE:
                self.header = ""
            self.where = HEADER
            self.header += token
        elif token == MESSAGE and self.where == HEADER:
            self._open_body()
        elif token in ENDS:
            if self.where == BODY:
                self._close_message()
            self.where = OUTSIDE
        else:  # `<|constrain|>` in a header, or a token where none belongs: text
            self._text(token)

    def feed(self, delta: str) -> Split:
        self._pending = _LEXICON.route(self._pending + delta, False, self._text, self._token)
        return self._take()

    def flush_pending(self) -> None:
        self._pending = _LEXICON.route(self._pending, True, self._text, self._token)

    def flush(self) -> Split:
        self.flush_pending()  # a header never completed is dropped with its text
        return self._close()


@register_format("gpt_oss", aliases=("openai_gptoss", "harmony"))
class HarmonyFormat(ThinkTagFormat):
    think_start, think_end = f"{CHANNEL}analysis{MESSAGE}", f"{CHANNEL}final{MESSAGE}"
    starts_in_thinking = True
    signature = (CHANNEL, MESSAGE)
    detect_priority = 20

    def _after(self, text: str, prompt: str) -> HarmonySplitter:
        s = HarmonySplitter(prompt)
        s.feed(text)
        s.flush_pending()
        return s

    def start_state(self, prompt: str = "") -> str:
        return THINKING if HarmonySplitter(prompt).thinking else CONTENT

    def thinking_state(self, text: str, prompt: str = "") -> str:
        return THINKING if self._after(text, prompt).thinking else CONTENT

    def split(self, text: str, prompt: str = "") -> Split:
        s = HarmonySplitter(prompt)
        return s.feed(text) + s.flush()

    def splitter(self, prompt: str = "") -> StreamSplitter:
        return HarmonySplitter(prompt)

    def strip_markers(self, text: str) -> str:
        return _HEADERS.sub("", text)

    def marker_texts(self) -> tuple[str, ...]:
        return TOKENS

    def count_reasoning_tokens(self, pieces: Iterable[str], prompt: str = "") -> int | None:
        splitter, count = HarmonySplitter(prompt), 0
        for piece in pieces:
            count += splitter.thinking  # until a final header is complete
            splitter.feed(piece)
        return count

    def is_answer_step(self, step: str, after_thinking: bool) -> bool:
        return after_thinking or self.think_end in step

    def force_text(self, text: str, prompt: str = "") -> str:
        s = self._after(text, prompt)
        if not s.thinking:
            return super().force_text(text, prompt)
        if s.where == BODY:
            close = ENDS[0] + OPEN_FINAL
        elif s.where == HEADER and CHANNEL in s.header:
            close = MESSAGE + ENDS[0] + OPEN_FINAL
        elif s.where == HEADER:  # the assistant header the template wrote, no channel yet
            close = f"{CHANNEL}final{MESSAGE}"
        else:
            close = OPEN_FINAL
        return close + self.answer_prefix.lstrip("\n")
