"""DeepSeek-V3 / R1-0528: `<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function
<｜tool▁sep｜>NAME` and the arguments in a ```json fence, `<｜tool▁call▁end｜>`."""

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

BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_END = "<｜tool▁call▁end｜>"
_CALL = re.compile(
    r"<｜tool▁call▁begin｜>(?P<type>.*?)<｜tool▁sep｜>(?P<name>.*?)\s*```(?:json)?\s*"
    r"(?P<args>.*?)\s*```\s*<｜tool▁call▁end｜>",
    re.DOTALL,
)


class DeepSeekV3Parser(ToolParser):
    name = "deepseek_v3"
    aliases = ("deepseek_r1",)
    openers = (BEGIN,)

    def extract(self, text: str) -> Extracted:
        start = text.find(BEGIN)
        if start < 0:
            return Extracted(text)
        calls = []
        for m in _CALL.finditer(text, start):
            try:
                args = arguments_text(json.loads(m.group("args")))
            except json.JSONDecodeError:
                args = None
            if args is None:
                return Extracted(text)
            calls.append(ParsedCall(m.group("name").strip(), args))
        if not calls:
            return Extracted(text)
        return Extracted(content_or_none(text[:start]), calls)

    def complete_prefix(self, region: str) -> int:
        end = region.rfind(CALL_END)
        return 0 if end < 0 else end + len(CALL_END)
