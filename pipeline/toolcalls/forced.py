"""tool_choice `required` or a named function, as vLLM forces it: a grammar makes the content
a JSON list of calls, `[{"name": ..., "parameters": {...}}]`, each call's parameters held to its
tool's schema (one call when parallel calls are off, or a function is named). `ForcedList`
reads that list as a tool-call syntax: whole, and element by element while it is written."""

from __future__ import annotations

import json
import re
from typing import Any

from pipeline.toolcalls.base import (
    Extracted,
    ParsedCall,
    PartialCall,
    ToolParser,
    partial_json_call,
)

_SEPARATOR = re.compile(r"\s*,?\s*")


def forced_schema(tools: list[Any], choice: str, parallel: bool) -> dict[str, Any]:
    """The JSON schema of the forced list; `tools` are schema.Tool (or their dicts' shape)."""
    chosen = [t for t in tools if choice == "required" or t.function.name == choice]
    items = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t.function.name},
                "parameters": t.function.parameters or {"type": "object"},
            },
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for t in chosen
    ]
    one = parallel and choice == "required"
    return {
        "type": "array",
        "items": items[0] if len(items) == 1 else {"anyOf": items},
        "minItems": 1,
        **({} if one else {"maxItems": 1}),
    }


class ForcedList(ToolParser):
    """The forced list's calls. The grammar starts after the thinking's end or a tool-call
    opener, and a model that writes the opener itself (`<tool_call>[...]`) has it in the
    content: the list is read from its `[`. A call is finished when its object closes (a list
    cut off by the token limit keeps its finished calls)."""

    name = "forced"
    openers = ("[",)

    def extract(self, text: str) -> Extracted:
        calls = [call for call, _ in self._finished(text)]
        return Extracted(None, calls) if calls else Extracted(text)

    def complete_prefix(self, region: str) -> int:
        found = self._finished(region)
        return found[-1][1] if found else 0

    def partial(self, tail: str) -> PartialCall | None:
        return partial_json_call(tail, ("parameters",))

    @staticmethod
    def _finished(text: str) -> list[tuple[ParsedCall, int]]:
        """The list's finished calls, each with where its object ends."""
        start = text.find("[")
        if start < 0:
            return []
        decoder, pos, out = json.JSONDecoder(), start + 1, []
        while True:
            pos = _SEPARATOR.match(text, pos).end()  # type: ignore[union-attr]
            try:
                value, pos = decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                return out
            if isinstance(value, dict) and isinstance(value.get("name"), str):
                args = json.dumps(value.get("parameters", {}), ensure_ascii=False)
                out.append((ParsedCall(value["name"], args), pos))
