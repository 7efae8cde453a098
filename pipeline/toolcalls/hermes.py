"""Hermes / Qwen: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, any number;
the last may be cut off by the end of the output. Content: the text before the first call."""

from __future__ import annotations

import json
import re

from pipeline.toolcalls.base import (
    ARGUMENT_KEYS,
    MatchedCalls,
    ParsedCall,
    PartialCall,
    call_from_object,
    partial_json_call,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesParser(MatchedCalls):
    name = "hermes"
    aliases = ("qwen", "qwen25", "qwen3")
    openers = (OPEN,)
    call_end = CLOSE
    pattern = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)$", re.DOTALL)

    def call(self, m: re.Match[str]) -> ParsedCall | None:
        body = (m.group(1) if m.group(1) is not None else m.group(2)).strip()
        try:
            return call_from_object(json.loads(body))
        except json.JSONDecodeError:
            return None

    def partial(self, tail: str) -> PartialCall | None:
        at = tail.find(OPEN)
        return None if at < 0 else partial_json_call(tail[at + len(OPEN) :], ARGUMENT_KEYS)
