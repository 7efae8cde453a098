"""Build the tiny reasoner's character-level tokenizer (one token per character).

    python tools/build_tiny_tokenizer.py pipeline/assets/tiny-reasoner

Writes tokenizer.json (HF `tokenizers`: a BPE model with no merges, so every character is its
own token, and a Fuse decoder, so decoding joins characters without spaces), plus
tokenizer_config.json and special_tokens_map.json for `transformers.AutoTokenizer`.
Encoding adds `<s>` in front; decoding gives back the exact text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, processors

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))  # newline + printable ASCII

# Renders the last user message in the training prompt format (`Q: <question>` + newline).
CHAT_TEMPLATE = (
    "{% set users = messages | selectattr('role', 'equalto', 'user') | list %}"
    "{{ bos_token }}Q: {{ (users | last)['content'] | replace('\\n', ' ') | trim }}{{ '\\n' }}"
)


def build_tokenizer() -> Tokenizer:
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in CHARS:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.add_special_tokens(list(SPECIALS))
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    return tok


def write_tokenizer(out_dir: str | Path) -> Tokenizer:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1024,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    specials = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
    return tok


if __name__ == "__main__":
    write_tokenizer(sys.argv[1] if len(sys.argv) > 1 else "pipeline/assets/tiny-reasoner")
