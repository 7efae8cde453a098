"""Tool-call parsers by vLLM's `--tool-call-parser` names, and each reasoning format's default
(the family's syntax; a model whose template writes another one names it with
`--tool-call-parser`)."""

from __future__ import annotations

from pipeline.errors import InvalidRequestError
from pipeline.toolcalls.base import ToolParser
from pipeline.toolcalls.deepseek_v3 import DeepSeekV3Parser
from pipeline.toolcalls.hermes import HermesParser
from pipeline.toolcalls.kimi_k2 import KimiK2Parser
from pipeline.toolcalls.llama3_json import Llama3JsonParser
from pipeline.toolcalls.mistral import MistralParser
from pipeline.toolcalls.openai import OpenAIParser

_CLASSES: tuple[type[ToolParser], ...] = (
    HermesParser, MistralParser, Llama3JsonParser, DeepSeekV3Parser, KimiK2Parser, OpenAIParser,
)  # fmt: skip
PARSERS: dict[str, type[ToolParser]] = {c.name: c for c in _CLASSES}
_BY_ALIAS = {a: c for c in _CLASSES for a in (c.name, *c.aliases)}

# reasoning format -> its family's tool-call syntax (formats whose models write one of ours)
FORMAT_PARSERS = {
    "qwen3": "hermes",
    "deepseek_r1": "hermes",  # the R1 distills of Qwen; a DeepSeek-V3 base writes deepseek_v3
    "glm45": "hermes",
    "hunyuan_a13b": "hermes",
    "mistral": "mistral",
    "kimi_k2": "kimi_k2",
    "deepseek_v3": "deepseek_v3",
    "gpt_oss": "openai",
}


# Every parser's call opener (not llama3_json's bare `{`): where a tool call begins in any
# family's syntax. Verification reads nothing from there on (tool arguments are not claims).
CALL_OPENERS = tuple(sorted({m for c in _CLASSES for m in c.marks()}))


def before_calls(text: str) -> str:
    """`text` up to its first tool-call opener (all of it when there is none)."""
    found = [i for i in (text.find(o) for o in CALL_OPENERS) if i >= 0]
    return text[: min(found)] if found else text


def get_parser(name: str) -> ToolParser:
    cls = _BY_ALIAS.get(name)
    if cls is None:
        known = ", ".join(sorted(PARSERS))
        raise InvalidRequestError(f"unknown tool-call parser {name!r}; known: {known}")
    return cls()


def parser_for_format(format_name: str) -> str | None:
    return FORMAT_PARSERS.get(format_name)
