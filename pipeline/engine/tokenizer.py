"""Tokenizer wrapper: HF fast tokenizers, chat templates, EOS ids, step-boundary detection."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pipeline.errors import ModelLoadError

# transformers' lazy module is not thread-safe on first import: stage workers that load their
# tokenizers on engine threads at once got "cannot import name 'AutoTokenizer'".
_IMPORT_LOCK = threading.Lock()


def _load_hf(path: Path):
    """The class tokenizer_config.json names, taken from transformers directly when it is a
    tokenizers-backed one (the usual case; AutoTokenizer would pick the same), else
    AutoTokenizer. Why: transformers' auto module imports its generation code, which imports
    torch; the control plane (ingest) tokenizes without it."""
    import transformers  # heavy: only when a tokenizer is needed

    config = path / "tokenizer_config.json"
    name = json.loads(config.read_text()).get("tokenizer_class") if config.is_file() else None
    cls = getattr(transformers, name, None) if isinstance(name, str) else None
    backend = getattr(transformers, "PreTrainedTokenizerFast", None)
    if cls is not None and backend is not None and issubclass(cls, backend):
        return cls.from_pretrained(str(path))
    return transformers.AutoTokenizer.from_pretrained(str(path))


class Tokenizer:
    """A model directory's tokenizer, with the few operations the engine and stages need."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if not (path / "tokenizer.json").is_file():
            raise ModelLoadError(f"{path} has no tokenizer.json")
        with _IMPORT_LOCK:  # (from_pretrained imports more of transformers' lazy modules)
            self.hf = _load_hf(path)
        eos: set[int] = set()
        if self.hf.eos_token_id is not None:
            eos.add(int(self.hf.eos_token_id))
        gen = path / "generation_config.json"
        if gen.is_file():
            ids = json.loads(gen.read_text()).get("eos_token_id")
            eos |= set(ids if isinstance(ids, list) else [] if ids is None else [ids])
        self.eos_token_ids = frozenset(eos)
        self._token_texts: list[str] | None = None
        self._kept: frozenset[int] = frozenset()  # special tokens decode keeps (keep_special)
        self._special: frozenset[int] = frozenset()

    @property
    def eos_token_id(self) -> int | None:
        return self.hf.eos_token_id

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        if skip_special_tokens and self._kept:
            token_ids = [i for i in token_ids if i not in self._special or i in self._kept]
            return self.hf.decode(token_ids, skip_special_tokens=False)
        return self.hf.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def keep_special(self, texts: Iterable[str]) -> None:
        """Decode keeps these special tokens: a reasoning format's markers where the tokenizer
        makes them special (gpt-oss's `<|channel|>`, Magistral's `[THINK]`), since the split
        reads them in the text. Other special tokens (EOS, padding) are still skipped."""
        added = getattr(self.hf, "added_tokens_decoder", {}) or {}
        special = {i for i, t in added.items() if getattr(t, "special", False)}
        self._special = frozenset(special | set(self.hf.all_special_ids))
        vocab = self.hf.get_vocab()
        self._kept = frozenset(vocab[t] for t in texts if t in vocab) & self._special

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
        """Render chat messages with the model's template, ready for the assistant's turn;
        `kwargs` are the template's own variables (`enable_thinking`, `thinking`)."""
        if not self.has_chat_template:
            raise ModelLoadError("this model's tokenizer has no chat template; send a prompt")
        text = self.hf.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **kwargs
        )
        # The template already writes any BOS token; do not add a second one.
        return self.encode(text, add_special_tokens=False)

    def token_texts(self) -> list[str]:
        """Each token id's text on its own (for step-boundary detection), computed once."""
        if self._token_texts is None:
            n = self.vocab_size
            self._token_texts = self.hf.batch_decode([[i] for i in range(n)])
        return self._token_texts


class StepBoundaryDetector:
    """Finds where a reasoning step ends: at the token that completes the delimiter.

    A delimiter may straddle tokens ("\\n\\n" as two "\\n" tokens), so each sequence carries a
    short text tail; single-character delimiters never need it.
    """

    def __init__(self, token_texts: list[str], delimiter: str):
        self.delimiter = delimiter
        self.token_texts = token_texts
        self.tail_len = len(delimiter) - 1
        self.delimiter_tokens = frozenset(i for i, t in enumerate(token_texts) if delimiter in t)

    def feed(self, tail: str, token_id: int) -> tuple[bool, str]:
        """(whether this token ends a step, the new tail)."""
        if token_id in self.delimiter_tokens:
            return True, ""
        if self.tail_len == 0 or token_id >= len(self.token_texts):
            return False, ""
        text = tail + self.token_texts[token_id]
        if self.delimiter in text:
            return True, ""
        return False, text[-self.tail_len :]


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas, holding back partial UTF-8.

    It re-decodes the whole output each time: simple and exact, and cheap at the lengths a
    terminal shows. Stages that stream many sequences send token ids, not text.
    """

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):  # an incomplete multi-byte character: wait for the rest
            return ""
        delta, self.emitted = text[len(self.emitted) :], text
        return delta
