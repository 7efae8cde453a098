"""Kimi K2: a section `<|tool_calls_section_begin|>` … `<|tool_calls_section_end|>` of calls
`<|tool_call_begin|>functions.NAME:IDX <|tool_call_argument_begin|>{...}<|tool_call_end|>`;
the id (`functions.NAME:IDX`) is the model's own and kept. Content: the text before the
section (text after it is dropped, as vLLM drops it)."""

from __future__ import annotations

import json
import re

from pipeline.toolcalls.base import (
    Extracted,
    ParsedCall,
    ToolParser,
    arguments_text,
    content_or_none,
)

SECTIONS = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
CALL_END = "<|tool_call_end|>"
_CALL = re.compile(
    r"<\|tool_call_begin\|>\s*(?P<id>[^<]+?)\s*<\|tool_call_argument_begin\|>\s*"
    r"(?P<args>.*?)\s*<\|tool_call_end\|>",
    re.DOTALL,
)
_ID = re.compile(r"(?:functions\.)?(?P<name>[^\s:]+):\d+")


class KimiK2Parser(ToolParser):
    name = "kimi_k2"
    openers = SECTIONS

    def extract(self, text: str) -> Extracted:
        start = self.first_opener(text, SECTIONS)
        if start < 0:
            return Extracted(text)
        calls = []
        for m in _CALL.finditer(text, start):
            ident = _ID.fullmatch(m.group("id"))
            if ident is None:  # not `name:index`: vLLM skips the call
                continue
            try:
                args = arguments_text(json.loads(m.group("args")))
            except json.JSONDecodeError:
                continue
            if args is not None:
                calls.append(ParsedCall(ident.group("name"), args, id=m.group("id")))
        return Extracted(content_or_none(text[:start]), calls)

    def complete_prefix(self, region: str) -> int:
        end = region.rfind(CALL_END)
        return 0 if end < 0 else end + len(CALL_END)
