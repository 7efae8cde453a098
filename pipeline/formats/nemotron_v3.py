"""NVIDIA Nemotron 3 (Nano): Qwen3's markers and tool calls, thinking switched by the template.

vLLM's `nemotron_v3` is its Qwen3 parser with `enable_thinking` deciding the start; here the
prompt decides it: the template opens `<think>` with thinking on and writes `<think></think>`
with it off. Its tokenizer looks like Qwen3's, so detection gives `qwen3`, which splits it
alike; name it (`--reasoning-format nemotron_v3`) to have the name on the Result.
"""

from __future__ import annotations

from pipeline.formats.qwen3 import Qwen3Format
from pipeline.formats.registry import register_format


@register_format("nemotron_v3", aliases=("nemotron_3",))
class NemotronV3Format(Qwen3Format):
    signature = ()
