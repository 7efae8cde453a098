"""Kimi K2: a section `<|tool_calls_section_begin|>` … `<|tool_calls_section_end|>` of calls
`<|tool_call_begin|>functions.NAME:IDX <|tool_call_argument_begin|>{...}<|tool_call_end|>`;
the id (`functions.NAME:IDX`) is the model's own and kept. Content: the text before the
section (text after it is dropped, as vLLM drops it)."""

from __future__ import annotations

import re

from pipeline.toolcalls.base import MatchedCalls, ParsedCall, PartialCall, json_arguments

SECTIONS = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
_ID = re.compile(r"(?:functions\.)?(?P<name>[^\s:]+):\d+")
_BEGUN = re.compile(r"<\|tool_call_begin\|>\s*(?P<id>[^<]+?)\s*<\|tool_call_argument_begin\|>\s*")


class KimiK2Parser(MatchedCalls):
    name = "kimi_k2"
    openers = SECTIONS
    call_end = "<|tool_call_end|>"
    strict = False  # a call vLLM cannot read is skipped, the others kept
    pattern = re.compile(
        r"<\|tool_call_begin\|>\s*(?P<id>[^<]+?)\s*<\|tool_call_argument_begin\|>\s*"
        r"(?P<args>.*?)\s*<\|tool_call_end\|>",
        re.DOTALL,
    )

    def call(self, m: re.Match[str]) -> ParsedCall | None:
        ident = _ID.fullmatch(m.group("id"))  # not `name:index`: vLLM skips the call
        args = json_arguments(m.group("args")) if ident else None
        return None if args is None else ParsedCall(ident.group("name"), args, id=m.group("id"))

    def partial(self, tail: str) -> PartialCall | None:
        m = _BEGUN.search(tail)
        ident = _ID.fullmatch(m.group("id")) if m else None
        if ident is None:
            return None
        args = tail[m.end() :]
        return PartialCall(ident.group("name"), args if args[:1] in ("", "{") else None, m["id"])
