"""Random-weight tiny checkpoints of each supported family, written by HF transformers."""

from __future__ import annotations

from pathlib import Path

import torch

BASE = dict(
    vocab_size=320,
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    rms_norm_eps=1e-5,
)

# name -> (transformers config class name, overrides)
VARIANTS: dict[str, tuple[str, dict]] = {
    "llama": ("LlamaConfig", {}),
    "llama3-rope-tied": (
        "LlamaConfig",
        {
            "tie_word_embeddings": True,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 128,
            },
        },
    ),
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", {}),
    "qwen2-yarn": (
        "Qwen2Config",
        {
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 256,
            }
        },
    ),
    "qwen3": ("Qwen3Config", {"head_dim": 32}),
}


def make_tiny_model(name: str, root: Path, seed: int = 0) -> Path:
    """Write a random-weight checkpoint (fp32, safetensors) and return its directory."""
    import transformers

    cls_name, overrides = VARIANTS[name]
    cfg = getattr(transformers, cls_name)(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    # Default init is tiny (std 0.02): widen it so logits are spread and argmax ties are rare.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.08)
    out = root / name
    model.save_pretrained(out, safe_serialization=True)
    return out


def add_char_tokenizer(
    path: Path,
    vocab_size: int = BASE["vocab_size"],
    extra_tokens: tuple[str, ...] = (),
    chat_template: str | None = None,
) -> Path:
    """Give a checkpoint a character tokenizer covering its whole vocabulary.

    Ids 0..96 are <eos>, printable ASCII and newline; the rest decode to filler strings, so
    anything a random model emits can be detokenized. `extra_tokens` (`<think>`, `</think>`)
    take the last ids as added, non-special tokens (as in DeepSeek-R1's and Qwen3's
    tokenizers); `chat_template` goes into tokenizer_config.json.
    """
    import json
    import string

    from tokenizers import AddedToken, Tokenizer, decoders, models

    chars = ["<eos>", *string.printable[:95], "\n"]
    chars += [f"<t{i}>" for i in range(len(chars), vocab_size - len(extra_tokens))]
    chars += list(extra_tokens)
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[]))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(["<eos>"])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra_tokens])
    tok.save(str(path / "tokenizer.json"))
    config = {"eos_token": "<eos>", "tokenizer_class": "PreTrainedTokenizerFast"}
    if chat_template is not None:
        config["chat_template"] = chat_template
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


@torch.no_grad()
def hf_greedy(model, prompt_ids: list[int], num_tokens: int) -> list[int]:
    """Greedy continuation through HF's own forward and KV cache, EOS neither stopping nor
    suppressed (generate()'s min_new_tokens would mask EOS logits; the engine's ignore_eos
    only keeps going): like for like."""
    out = model(torch.tensor([prompt_ids]), use_cache=True)
    past, tokens = out.past_key_values, []
    for _ in range(num_tokens):
        tokens.append(int(out.logits[0, -1].argmax()))
        out = model(torch.tensor([[tokens[-1]]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
    return tokens


def hf_greedy_batch(model, prompts: list[list[int]], num_tokens: int) -> list[list[int]]:
    """hf_greedy for many prompts in one left-padded batch: a decode step of a small model on
    one CPU thread is bound by reading the weights, so a batch of 16 costs about what one
    prompt does alone. Padding is masked and positions count real tokens only, as HF's
    generate() does; on the bundled checkpoints it gives hf_greedy's tokens (the parity tests
    that use it were checked against the one-at-a-time loop)."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    past, tokens = out.past_key_values, [[] for _ in prompts]
    for _ in range(num_tokens):
        step = out.logits[:, -1].argmax(-1)
        for row, token in zip(tokens, step.tolist(), strict=True):
            row.append(int(token))
        mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype)], dim=1)
        positions = positions[:, -1:] + 1
        out = model(
            input_ids=step[:, None],
            attention_mask=mask,
            position_ids=positions,
            past_key_values=past,
            use_cache=True,
        )
        past = out.past_key_values
    return tokens
