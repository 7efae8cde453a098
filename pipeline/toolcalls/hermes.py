"""Hermes / Qwen: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, any number;
the last may be cut off by the end of the output. Content: the text before the first call."""

from __future__ import annotations

import json
import re

from pipeline.toolcalls.base import Extracted, ToolParser, call_from_object, content_or_none

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)$", re.DOTALL)


class HermesParser(ToolParser):
    name = "hermes"
    aliases = ("qwen", "qwen25", "qwen3")
    openers = (OPEN,)

    def extract(self, text: str) -> Extracted:
        start = text.find(OPEN)
        if start < 0:
            return Extracted(text)
        calls = []
        for m in _CALL.finditer(text, start):
            body = (m.group(1) if m.group(1) is not None else m.group(2)).strip()
            try:
                call = call_from_object(json.loads(body))
            except json.JSONDecodeError:
                call = None
            if call is None:  # one unreadable call: the output is content, as vLLM keeps it
                return Extracted(text)
            calls.append(call)
        return Extracted(content_or_none(text[:start]), calls)

    def complete_prefix(self, region: str) -> int:
        end = region.rfind(CLOSE)
        return 0 if end < 0 else end + len(CLOSE)
