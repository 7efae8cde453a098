"""DeepSeek-V3 / R1-0528: `<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function
<｜tool▁sep｜>NAME` and the arguments in a ```json fence, `<｜tool▁call▁end｜>`."""

from __future__ import annotations

import re

from pipeline.toolcalls.base import MatchedCalls, ParsedCall, PartialCall, json_arguments

BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
# a call whose arguments have begun: its name is whole, the fence open, the object started
_BEGUN = re.compile(
    r"<｜tool▁call▁begin｜>.*?<｜tool▁sep｜>(?P<name>[^`]*?)\s*```(?:json)?\s*(?=\{)", re.DOTALL
)


class DeepSeekV3Parser(MatchedCalls):
    name = "deepseek_v3"
    aliases = ("deepseek_r1",)
    openers = (BEGIN,)
    call_end = "<｜tool▁call▁end｜>"
    pattern = re.compile(
        r"<｜tool▁call▁begin｜>(?P<type>.*?)<｜tool▁sep｜>(?P<name>.*?)\s*```(?:json)?\s*"
        r"(?P<args>.*?)\s*```\s*<｜tool▁call▁end｜>",
        re.DOTALL,
    )

    def call(self, m: re.Match[str]) -> ParsedCall | None:
        args = json_arguments(m.group("args"))
        return None if args is None else ParsedCall(m.group("name").strip(), args)

    def partial(self, tail: str) -> PartialCall | None:
        m = _BEGUN.search(tail)
        return None if m is None else PartialCall(m.group("name").strip(), tail[m.end() :])
