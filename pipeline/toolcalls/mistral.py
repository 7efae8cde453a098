"""Mistral: `[TOOL_CALLS]` then a JSON list of `{"name", "arguments"}` (tokenizers before v11),
or `name{...}` / `name[ARGS]{...}` after each `[TOOL_CALLS]` (v11 on). Content: the text
before the first marker."""

from __future__ import annotations

import json
import re

from pipeline.toolcalls.base import (
    ARGUMENT_KEYS,
    Extracted,
    ParsedCall,
    PartialCall,
    ToolParser,
    arguments_text,
    call_from_object,
    content_or_none,
    partial_json_call,
)

MARK, ARGS = "[TOOL_CALLS]", "[ARGS]"
_LIST = re.compile(r"\[.*\]", re.DOTALL)
_NAME = re.compile(r"\s*([A-Za-z0-9_.-]+)\s*")
_BEGUN = re.compile(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[ARGS\]|(?=\{))")  # `name[ARGS]` / `name{`
_V11 = re.compile(r"\s*[A-Za-z0-9_.-]+\s*(?:\[ARGS\]|\{|$)")  # `name{`, `name[ARGS]`, `name`


class MistralParser(ToolParser):
    name = "mistral"
    openers = (MARK,)

    def extract(self, text: str) -> Extracted:
        start = text.find(MARK)
        if start < 0:
            return Extracted(text)
        content = content_or_none(text[:start])
        rest = text[start + len(MARK) :]
        if not _V11.match(rest):
            calls = self._json_list(rest)
            if calls is None:  # neither form: what follows the marker is content
                return Extracted(content_or_none(rest.strip()))
            return Extracted(content, calls)
        calls = []
        for piece in rest.split(MARK):
            call = self._named(piece)
            if call is None:
                return Extracted(text)
            calls.append(call)
        return Extracted(content, calls)

    def partial(self, tail: str) -> PartialCall | None:
        # every call is finished only at the output's end: the first one streams
        at = tail.find(MARK)
        if at < 0:
            return None
        rest = tail[at + len(MARK) :]
        if rest.lstrip().startswith("["):
            return partial_json_call(rest, ARGUMENT_KEYS)
        piece = rest.split(MARK, 1)[0]
        m = _BEGUN.match(piece)
        if m is None:
            return None
        args = piece[m.end() :]
        return PartialCall(m.group(1), args if args.lstrip()[:1] in ("", "{") else None)

    @staticmethod
    def _json_list(rest: str) -> list[ParsedCall] | None:
        body = rest.strip()
        try:
            value, _ = json.JSONDecoder().raw_decode(body)
        except json.JSONDecodeError:
            m = _LIST.search(body)  # junk around the list
            try:
                value = json.loads(m.group(0)) if m else None
            except json.JSONDecodeError:
                value = None
        if isinstance(value, dict):
            value = [value]
        if not isinstance(value, list):
            return None
        calls = [call_from_object(v) for v in value]
        return None if any(c is None for c in calls) else calls  # type: ignore[return-value]

    @staticmethod
    def _named(piece: str) -> ParsedCall | None:
        name_end = min(i for i in (piece.find("{"), piece.find(ARGS), len(piece)) if i >= 0)
        name = piece[:name_end].strip()
        if not _NAME.fullmatch(name):
            return None
        body = piece[name_end:]
        body = body[len(ARGS) :] if body.startswith(ARGS) else body
        if not body.strip():  # a call without arguments
            return ParsedCall(name, "{}")
        try:
            value, _ = json.JSONDecoder().raw_decode(body.strip())
        except json.JSONDecodeError:
            return None
        args = arguments_text(value)
        return None if args is None else ParsedCall(name, args)
