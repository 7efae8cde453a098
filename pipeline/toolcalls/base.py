"""What every tool-call parser is: openers that start a call region, and the extraction of
the calls (name, JSON arguments) and the content around them from a whole text."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object's text, as OpenAI's `function.arguments`
    id: str | None = None  # the model's own id where its format writes one (Kimi K2)


@dataclass(slots=True)
class Extracted:
    content: str | None  # the text that is not a call (None: there is none)
    calls: list[ParsedCall] = field(default_factory=list)


class ToolParser:
    """One model family's tool-call syntax. `extract` reads a whole output; streaming
    (stream.py) holds text from the first opener on and asks `complete_prefix` how much of the
    held region holds only finished calls."""

    name: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    openers: ClassVar[tuple[str, ...]]
    # What marks a call in any text (verification reads nothing from there on); the openers,
    # unless they also begin what is not a call (Harmony's headers, Llama's bare `{`).
    call_marks: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def marks(cls) -> tuple[str, ...]:
        return cls.openers if cls.call_marks is None else cls.call_marks

    def extract(self, text: str) -> Extracted:
        raise NotImplementedError

    def complete_prefix(self, region: str) -> int:
        """How much of `region` (text from the first opener on) holds only calls that are
        finished; 0 where a call's end is known only at the end of the output."""
        return 0

    @staticmethod
    def first_opener(text: str, openers: tuple[str, ...]) -> int:
        found = [i for i in (text.find(o) for o in openers) if i >= 0]
        return min(found) if found else -1


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


def call_from_object(
    obj: Any, keys: tuple[str, ...] = ("arguments", "parameters")
) -> ParsedCall | None:
    """`{"name": ..., "arguments": ...}` (or `parameters`) as a call; None if it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    key = next((k for k in keys if k in obj), None)
    if key is None:
        return None
    args = arguments_text(obj[key])
    return None if args is None else ParsedCall(obj["name"], args)


def content_or_none(text: str) -> str | None:
    return text if text.strip() else None
