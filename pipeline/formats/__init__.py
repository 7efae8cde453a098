"""Reasoning formats: one definition of how a model writes its reasoning.

A `ReasoningFormat` knows a model family's thinking markers, step delimiter, answer styles and
the texts that force or probe an answer; `get_format(name)` gives one (vLLM's and SGLang's
parser names work too), `detect_format(dir)` names the one a model directory needs
(docs/reasoning-formats.md). Pure logic, no torch: torch-free processes (the gateway) import it.
"""

# The built-in formats register themselves when their modules are imported here.
from pipeline.formats.answers import find_answer
from pipeline.formats.base import ReasoningFormat
from pipeline.formats.deepseek_r1 import DeepSeekR1Format
from pipeline.formats.deepseek_v3 import DeepSeekV3Format
from pipeline.formats.detect import detect_format, format_for
from pipeline.formats.ernie45 import Ernie45Format
from pipeline.formats.gemma4 import Gemma4Format
from pipeline.formats.glm45 import Glm45Format
from pipeline.formats.granite import GraniteFormat
from pipeline.formats.harmony import HarmonyFormat
from pipeline.formats.hunyuan_a13b import HunyuanA13BFormat
from pipeline.formats.kimi_k2 import KimiK2Format
from pipeline.formats.minimax_m2 import MiniMaxM2AppendThinkFormat, MiniMaxM2Format
from pipeline.formats.mistral import MistralFormat
from pipeline.formats.nemotron_v3 import NemotronV3Format
from pipeline.formats.olmo3 import Olmo3Format
from pipeline.formats.plain import PlainFormat
from pipeline.formats.qwen3 import Qwen3Format
from pipeline.formats.registry import format_names, get_format, register_format
from pipeline.formats.seed_oss import SeedOssFormat
from pipeline.formats.split import Split, StreamSplitter
from pipeline.formats.step3 import Step3Format
from pipeline.formats.think_tags import ThinkTagFormat
from pipeline.formats.tiny import TinyFormat

__all__ = [
    "DeepSeekR1Format",
    "DeepSeekV3Format",
    "Ernie45Format",
    "Gemma4Format",
    "Glm45Format",
    "GraniteFormat",
    "HarmonyFormat",
    "HunyuanA13BFormat",
    "KimiK2Format",
    "MiniMaxM2AppendThinkFormat",
    "MiniMaxM2Format",
    "MistralFormat",
    "NemotronV3Format",
    "Olmo3Format",
    "PlainFormat",
    "Qwen3Format",
    "ReasoningFormat",
    "SeedOssFormat",
    "Split",
    "Step3Format",
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
