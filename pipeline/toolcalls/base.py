"""What every tool-call parser is: openers that start a call region, and the extraction of
the calls (name, JSON arguments) and the content around them from a whole text."""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object's text, as OpenAI's `function.arguments`
    id: str | None = None  # the model's own id where its format writes one (Kimi K2)


@dataclass(frozen=True, slots=True)
class PartialCall:
    """A call still being written: its name, and its arguments' raw text so far (from their
    first character on; None: not a JSON object to stream, it comes whole when finished)."""

    name: str
    arguments: str | None
    id: str | None = None


@dataclass(slots=True)
class Extracted:
    content: str | None  # the text that is not a call (None: there is none)
    calls: list[ParsedCall] = field(default_factory=list)


class ToolParser(ABC):
    """One model family's tool-call syntax. `extract` reads a whole output; streaming
    (stream.py) holds text from the first opener on and asks `complete_prefix` how much of the
    held region holds only finished calls."""

    name: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    openers: ClassVar[tuple[str, ...]]
    # What marks a call in any text (verification reads nothing from there on); the openers,
    # unless they also begin what is not a call (Harmony's headers, Llama's bare `{`).
    call_marks: ClassVar[tuple[str, ...] | None] = None
    call_end: ClassVar[str] = ""  # what closes one call ("": only the output's end does)

    @classmethod
    def marks(cls) -> tuple[str, ...]:
        return cls.openers if cls.call_marks is None else cls.call_marks

    @abstractmethod
    def extract(self, text: str) -> Extracted:
        """The calls of a whole output, and the content around them."""

    def complete_prefix(self, region: str) -> int:
        """How much of `region` (text from the first opener on) holds only calls that are
        finished: up to the last `call_end`; 0 where a call's end is known only at the end of
        the output."""
        end = region.rfind(self.call_end) if self.call_end else -1
        return 0 if end < 0 else end + len(self.call_end)

    def partial(self, tail: str) -> PartialCall | None:
        """The call being written in `tail` (the region's text after its finished calls), once
        its name is known; None: none yet, or a syntax whose calls come only whole."""
        return None

    @staticmethod
    def first_opener(text: str, openers: tuple[str, ...]) -> int:
        found = [i for i in (text.find(o) for o in openers) if i >= 0]
        return min(found) if found else -1


class MatchedCalls(ToolParser):
    """A syntax whose calls a pattern matches one by one from the first opener on; the content
    is the text before it. `strict`: an unreadable call (or none at all) leaves the whole output
    as content, as vLLM's hermes and deepseek_v3 parsers do; else it is skipped (kimi_k2)."""

    pattern: ClassVar[re.Pattern[str]]
    strict: ClassVar[bool] = True

    @abstractmethod
    def call(self, m: re.Match[str]) -> ParsedCall | None:
        """The call one match holds; None if it is unreadable."""

    def extract(self, text: str) -> Extracted:
        start = self.first_opener(text, self.openers)
        if start < 0:
            return Extracted(text)
        calls = []
        for m in self.pattern.finditer(text, start):
            call = self.call(m)
            if call is None and self.strict:
                return Extracted(text)
            if call is not None:
                calls.append(call)
        if not calls and self.strict:
            return Extracted(text)
        return Extracted(content_or_none(text[:start]), calls)


def json_arguments(text: str) -> str | None:
    """`arguments_text` of a JSON text; None if it is not JSON."""
    try:
        return arguments_text(json.loads(text))
    except json.JSONDecodeError:
        return None


def arguments_text(value: Any) -> str | None:
    """OpenAI's arguments string: an object as JSON; a string that already holds a JSON
    object as it is (a model that serialized them); any other value as its JSON."""
    if isinstance(value, str):
        try:
            if isinstance(json.loads(value), dict):
                return value
        except json.JSONDecodeError:
            pass
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return None


ARGUMENT_KEYS = ("arguments", "parameters")  # what a JSON call names its arguments


def call_from_object(obj: Any, keys: tuple[str, ...] = ARGUMENT_KEYS) -> ParsedCall | None:
    """`{"name": ..., "arguments": ...}` (or `parameters`) as a call; None if it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    key = next((k for k in keys if k in obj), None)
    if key is None:
        return None
    args = arguments_text(obj[key])
    return None if args is None else ParsedCall(obj["name"], args)


_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


def partial_json_call(text: str, keys: tuple[str, ...]) -> PartialCall | None:
    """`{"name": ..., "arguments": {...` being written: its name once the string is closed, and
    the arguments' text once they have begun (an object; a name written after its arguments
    is known only when the call is finished)."""
    start = text.find("{")
    name = _NAME.search(text, start) if start >= 0 else None
    if name is None:
        return None
    alternatives = "|".join(map(re.escape, keys))
    key = re.search(rf'"(?:{alternatives})"\s*:\s*', text[start:])
    if key is not None and start + key.start() < name.start():
        return None
    try:
        decoded = json.loads(f'"{name.group(1)}"')
    except json.JSONDecodeError:
        return None
    if key is None:
        return PartialCall(decoded, "")
    args = text[start + key.end() :]
    return PartialCall(decoded, args if args[:1] in ("", "{") else None)


def content_or_none(text: str) -> str | None:
    return text if text.strip() else None
