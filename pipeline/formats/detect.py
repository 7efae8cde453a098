"""Which format a Hugging Face model directory's model writes (JSON only: no transformers).

1. `stepwise.json` with `"reasoning_format"`: the model's own say (the bundled tiny reasoner's);
2. the tokenizer's tokens (added and special tokens, vocabulary) and its chat templates, against
   each registered format's `signature` (`ReasoningFormat.matches`), most specific first
   (`detect_priority`): `<|channel|>` … `<|message|>` is gpt-oss, `[THINK]` Mistral, `<think>`
   with `[gMASK]` GLM, … and `<think>`/`</think>` alone `deepseek_r1` when the template's
   generation prompt opens `<think>` (R1 and its distills), else `qwen3` (the model writes the
   marker itself; Qwen3's `enable_thinking` switch writes a closed `<think></think>`);
3. otherwise `plain`.
Unreadable or malformed files count as absent: detection never raises.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pipeline.formats.base import ReasoningFormat
from pipeline.formats.registry import format_classes, get_format

THINK_START, THINK_END = "<think>", "</think>"
_GENERATION_PROMPT = re.compile(r"add_generation_prompt")
# How far past `add_generation_prompt` its block is looked at (up to its `endif`).
_WINDOW = 400


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return ""


def _declared(model_dir: Path) -> str | None:
    config = _json(model_dir / "stepwise.json")
    if isinstance(config, dict):
        name = config.get("reasoning_format")
        if isinstance(name, str) and name.strip():
            return name.strip()
    return None


def _templates(value: Any) -> list[str]:
    """A `chat_template` value: one string, or a list of `{"name", "template"}`."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [
            t["template"]
            for t in value
            if isinstance(t, dict) and isinstance(t.get("template"), str)
        ]
    return []


def _contents(entries: Any) -> set[str]:
    """Token strings of a list or dict of added tokens (strings or `{"content": ...}`)."""
    if isinstance(entries, dict):
        entries = list(entries.values())
    if not isinstance(entries, list):
        return set()
    out = {e.get("content") if isinstance(e, dict) else e for e in entries}
    return {t for t in out if isinstance(t, str)}


def _signature_strings() -> set[str]:
    return {s for cls in format_classes() for s in cls.signature}


def _vocab_markers(tokenizer: dict) -> set[str]:
    """The formats' signature strings among a tokenizer.json's vocabulary (not only its added
    tokens)."""
    wanted = _signature_strings()
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):  # BPE, WordPiece: token -> id
        return {t for t in wanted if t in vocab}
    if isinstance(vocab, list):  # Unigram: [token, score] pairs
        pieces = {e[0] for e in vocab if isinstance(e, list) and e and isinstance(e[0], str)}
        return pieces & wanted
    return set()


def _tokens_and_templates(model_dir: Path) -> tuple[set[str], str]:
    """Every token the tokenizer files declare, and every chat template, joined."""
    tokens: set[str] = set()
    templates: list[str] = []
    config = _json(model_dir / "tokenizer_config.json")
    if isinstance(config, dict):
        tokens |= _contents(config.get("added_tokens_decoder"))
        tokens |= _contents(config.get("additional_special_tokens"))
        templates += _templates(config.get("chat_template"))
    tokenizer = _json(model_dir / "tokenizer.json")
    if isinstance(tokenizer, dict):
        tokens |= _contents(tokenizer.get("added_tokens")) | _vocab_markers(tokenizer)
    templates.append(_text(model_dir / "chat_template.jinja"))  # transformers >= 4.43
    processor = _json(model_dir / "chat_template.json")  # where processors keep theirs
    if isinstance(processor, dict):
        templates += _templates(processor.get("chat_template"))
    return tokens, "\n".join(templates)


def opens_thinking(template: str, start: str = THINK_START, end: str = THINK_END) -> bool:
    """Does the template's generation prompt write an open `start` marker (not a closed, empty
    `<think></think>` block)?"""
    for m in _GENERATION_PROMPT.finditer(template):
        block = template[m.end() : m.end() + _WINDOW]
        endif = block.find("endif")
        block = block if endif < 0 else block[:endif]
        at = block.rfind(start)
        if at >= 0 and end not in block[at:]:
            return True
    return False


def detect_format(model_dir: str | Path) -> str:
    """The reasoning format name for the model in `model_dir` (see the module docstring)."""
    model_dir = Path(model_dir)
    declared = _declared(model_dir)
    if declared is not None:
        return declared
    tokens, template = _tokens_and_templates(model_dir)
    candidates = sorted(format_classes(), key=lambda c: (-c.detect_priority, c.name))
    return next((c.name for c in candidates if c.matches(tokens, template)), "plain")


def format_for(model_dir: str | Path, name: str | None = None) -> ReasoningFormat:
    """The format named (an override: a flag, the environment), else the model's own."""
    return get_format(name or detect_format(model_dir))
