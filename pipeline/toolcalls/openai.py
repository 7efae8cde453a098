"""gpt-oss (Harmony): a message to a recipient is a tool call, `<|channel|>commentary
to=functions.NAME <|constrain|>json<|message|>{...}<|call|>` (the recipient may stand in the
role header instead: `<|start|>assistant to=functions.NAME<|channel|>commentary ...`). The
`gpt_oss` reasoning format sends such a message to the content as written, headers and all;
this parser takes the calls out of it. The arguments are the message's body as written (vLLM's
`openai` parser does not re-encode them). Content: what is left, special tokens removed."""

from __future__ import annotations

import re

from pipeline.toolcalls.base import Extracted, ParsedCall, ToolParser, content_or_none

START, CHANNEL = "<|start|>", "<|channel|>"
_CALL = re.compile(
    r"(?:<\|start\|>(?P<role>[^<]*))?<\|channel\|>(?P<header>[^<]*)"
    r"(?:<\|constrain\|>[^<]*)?<\|message\|>(?P<args>.*?)(?:<\|call\|>|<\|end\|>|$)",
    re.DOTALL,
)
_RECIPIENT = re.compile(r"\bto=functions\.(?P<name>[^\s<]+)")
_SPECIAL = re.compile(r"<\|(?:start|end|return|call|channel|message|constrain)\|>")


class OpenAIParser(ToolParser):
    name = "openai"
    aliases = ("gpt_oss", "harmony")
    openers = (START, CHANNEL)
    call_marks = ("to=functions.",)
    call_end = "<|call|>"

    def extract(self, text: str) -> Extracted:
        calls, kept, at = [], [], 0
        for m in _CALL.finditer(text):
            header = (m.group("role") or "") + " " + m.group("header")
            recipient = _RECIPIENT.search(header)
            if recipient is None:
                continue  # a message to no one: content
            kept.append(text[at : m.start()])
            at = m.end()
            calls.append(ParsedCall(recipient.group("name"), m.group("args").strip()))
        if not calls:
            return Extracted(text)
        kept.append(text[at:])
        rest = _SPECIAL.sub("", "".join(kept))
        return Extracted(content_or_none(rest.strip()), calls)
