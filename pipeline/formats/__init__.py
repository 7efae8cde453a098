"""Reasoning formats: one definition of how a model writes its reasoning.

A `ReasoningFormat` knows a model family's thinking markers, step delimiter, answer styles and
the texts that force or probe an answer; `get_format(name)` gives one, `detect_format(dir)`
names the one a model directory needs (docs/reasoning-formats.md). Pure logic, no torch:
torch-free processes (the gateway) import it too.
"""

# The built-in formats register themselves when their modules are imported here.
from pipeline.formats.answers import find_answer
from pipeline.formats.base import ReasoningFormat
from pipeline.formats.deepseek_r1 import DeepSeekR1Format
from pipeline.formats.detect import detect_format
from pipeline.formats.plain import PlainFormat
from pipeline.formats.qwen3 import Qwen3Format
from pipeline.formats.registry import format_for, format_names, get_format, register_format
from pipeline.formats.split import Split, StreamSplitter
from pipeline.formats.think_tags import ThinkTagFormat
from pipeline.formats.tiny import TinyFormat

__all__ = [
    "DeepSeekR1Format",
    "PlainFormat",
    "Qwen3Format",
    "ReasoningFormat",
    "Split",
    "StreamSplitter",
    "ThinkTagFormat",
    "TinyFormat",
    "detect_format",
    "find_answer",
    "format_for",
    "format_names",
    "get_format",
    "register_format",
]
