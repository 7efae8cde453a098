"""MiniMax-M2: the template opens the thinking; the model writes only `</think>`.

`minimax_m2` splits as R1 does (a `<minimax:tool_call>` inside the thinking ends it).
`minimax_m2_append_think` is vLLM's variant for clients that keep the thinking in the
conversation (MiniMax's interleaved thinking): no split at all, the content is the whole
generation with the `<think>` the template wrote put back in front.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.split import ContentSplitter, Split, StreamSplitter
from pipeline.formats.think_tags import ThinkTagFormat

TOOL_CALL = "<minimax:tool_call>"


@register_format("minimax_m2", aliases=("minimax",))
class MiniMaxM2Format(ThinkTagFormat):
    starts_in_thinking = True
    tool_call_starts = (TOOL_CALL,)
    signature = ("<think>", "</think>", TOOL_CALL)
    detect_priority = 5


@register_format("minimax_m2_append_think", aliases=("minimax_append_think",))
class MiniMaxM2AppendThinkFormat(MiniMaxM2Format):
    signature = ()  # chosen by name only: it is a choice of API shape, not of model

    def _opener(self, prompt: str) -> str:
        return (self.think_start or "") if self.thinking_at_start(prompt) else ""

    def split(self, text: str, prompt: str = "") -> Split:
        return Split("", (self._opener(prompt) + text).strip())

    def splitter(self, prompt: str = "") -> StreamSplitter:
        return _PrefixedSplitter(self._opener(prompt))

    def find_answer(self, text: str, prompt: str = "") -> str | None:
        # The answer is still the one after the thinking, not one the thinking tried.
        return self.answer_in(MiniMaxM2Format.split(self, text, prompt))


class _PrefixedSplitter(ContentSplitter):
    """All content, `prefix` first."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def feed(self, delta: str) -> Split:
        prefix, self._prefix = self._prefix, ""
        return super().feed(prefix + delta)

    def flush(self) -> Split:
        return self.feed("") + super().flush()
