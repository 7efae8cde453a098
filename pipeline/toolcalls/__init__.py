"""Tool calls in a model's output, by vLLM's `--tool-call-parser` names (docs/gateway.md)."""

from pipeline.toolcalls.base import Extracted, ParsedCall, ToolParser
from pipeline.toolcalls.registry import (
    CALL_OPENERS,
    PARSERS,
    before_calls,
    get_parser,
    parser_for_format,
)
from pipeline.toolcalls.stream import ArgsDelta, CallDelta, ToolCallStream

__all__ = [
    "ArgsDelta",
    "CALL_OPENERS",
    "before_calls",
    "PARSERS",
    "CallDelta",
    "Extracted",
    "ParsedCall",
    "ToolCallStream",
    "ToolParser",
    "get_parser",
    "parser_for_format",
]
