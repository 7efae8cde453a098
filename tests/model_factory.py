"""Random-weight tiny checkpoints of each supported family, written by HF transformers."""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.formats import get_format

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

# add_char_tokenizer's first ids: <eos>, printable ASCII, newline (the rest are fillers).
CHARS = ("<eos>", *string.printable[:95], "\n")

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
    special_tokens: tuple[str, ...] = (),
) -> Path:
    """Give a checkpoint a character tokenizer covering its whole vocabulary.

    Ids 0..96 are <eos>, printable ASCII and newline; the rest decode to filler strings, so
    anything a random model emits can be detokenized. `extra_tokens` (`<think>`, `</think>`)
    take the last ids as added tokens, non-special as in DeepSeek-R1's and Qwen3's tokenizers;
    those also in `special_tokens` are special, as gpt-oss's `<|channel|>` and Magistral's
    `[THINK]` are (decoding skips special tokens unless told to keep them); `chat_template`
    goes into tokenizer_config.json.
    """
    import json

    from tokenizers import AddedToken, Tokenizer, decoders, models

    chars = list(CHARS)
    chars += [f"<t{i}>" for i in range(len(chars), vocab_size - len(extra_tokens))]
    chars += list(extra_tokens)
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[]))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(["<eos>"])
    tok.add_tokens(
        [AddedToken(t, special=t in special_tokens, normalized=False) for t in extra_tokens]
    )
    tok.save(str(path / "tokenizer.json"))
    config: dict = {"eos_token": "<eos>", "tokenizer_class": "PreTrainedTokenizerFast"}
    if special_tokens:  # what marks them special to transformers
        config["additional_special_tokens"] = list(special_tokens)
    if chat_template is not None:
        config["chat_template"] = chat_template
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


@dataclass(frozen=True)
class FormatModel:
    """A random-weight model that writes in one reasoning format's markup: the family's marker
    tokens in its tokenizer (`special` where the real tokenizer makes them special) and a chat
    template of the family's shape. The templates open the thinking in the generation prompt
    (where the family can: with `enable_thinking`/`thinking` on), so what a random model writes
    is thinking and a spent budget has a block to close. `declared`: detection does not tell
    the family from another (nemotron_v3 from qwen3), so stepwise.json names it, as the bundled
    models do theirs."""

    tokens: tuple[str, ...]
    template: str
    special: bool = False
    declared: bool = False
    # The weights' seed, the first of 0, 1, 2, ... whose greedy runs on the tests' question,
    # within the token limits decode sets, are forced by a 16-token thinking budget (the
    # answer prefix then in the content), exit early at a probe that closes its box, and
    # (where the end marker is one token) close the thinking themselves and answer unforced.
    seed: int = 0


def _turns(open_role: str, close: str, assistant: str) -> str:
    """A template: each message as `open_role` (with `ROLE`) content `close`, then the prompt."""
    turn = open_role.replace("ROLE", "{{ m.role }}") + "{{ m.content }}" + close
    return (
        "{% for m in messages %}" + turn + "{% endfor %}"
        "{% if add_generation_prompt %}" + assistant + "{% endif %}"
    )


def _switch(on: str, off: str, var: str = "enable_thinking") -> str:
    """`off` where the request set `var` false (`on` where it set it true, or left it out)."""
    return f"{{% if {var} is defined and not {var} %}}{off}{{% else %}}{on}{{% endif %}}"


V3_SWITCH = "{% if thinking is defined and thinking %}<think>{% else %}</think>{% endif %}"
HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
           "<|constrain|>")  # fmt: skip
CHATML = ("<|im_start|>", "<|im_end|>")
FORMAT_MODELS: dict[str, FormatModel] = {
    "gpt_oss": FormatModel(
        HARMONY,
        _turns(
            "<|start|>ROLE<|message|>",
            "<|end|>",
            "<|start|>assistant<|channel|>analysis<|message|>",
        ),
        special=True,
    ),
    "mistral": FormatModel(
        ("[THINK]", "[/THINK]", "[INST]", "[/INST]", "[TOOL_CALLS]"),
        _turns("[INST]", "[/INST]", ""),
        special=True,
        seed=4,
    ),
    "seed_oss": FormatModel(
        ("<seed:think>", "</seed:think>", "<seed:bos>", "<seed:eos>", "<seed:tool_call>"),
        _turns("<seed:bos>ROLE\n", "<seed:eos>", "<seed:bos>assistant\n"),
        seed=4,
    ),
    "granite": FormatModel(
        (),
        "Think first: write 'Here is my thought process:', then 'Here is my response:'.\n"
        + _turns("<|ROLE|>", "\n", "<|assistant|>Here is my thought process:\n"),
        seed=2,
    ),
    "glm45": FormatModel(
        ("[gMASK]", "<sop>", "<think>", "</think>", "<tool_call>"),
        "[gMASK]<sop>"
        + _turns("<|ROLE|>\n", "", "<|assistant|>" + _switch("\n<think>", "\n<think></think>")),
        seed=2,
    ),
    # GLM-4.7: GLM-4.5's tokens and template shape (its generation prompt opens <think>);
    # detection says glm45 (the same split with the prompt), so stepwise.json names it.
    "glm47": FormatModel(
        ("[gMASK]", "<sop>", "<think>", "</think>", "<tool_call>"),
        "[gMASK]<sop>"
        + _turns("<|ROLE|>\n", "", "<|assistant|>" + _switch("\n<think>", "\n<think></think>")),
        declared=True,
        seed=2,
    ),
    "kimi_k2": FormatModel(
        (
            "<think>",
            "</think>",
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
        ),  # fmt: skip
        _turns("<|im_ROLE|>", "<|im_end|>", "<|im_assistant|>assistant<|im_middle|>"),
        special=True,
        seed=14,
    ),
    "hunyuan_a13b": FormatModel(
        ("<think>", "</think>", "<answer>", "</answer>"),
        _turns("<|ROLE|>", "\n", "<|assistant|><think>\n"),
        seed=2,
    ),
    "ernie45": FormatModel(
        ("<think>", "</think>", "<response>", "</response>"),
        _turns("<|ROLE|>", "\n", "<|assistant|><think>\n"),
        seed=6,
    ),
    "minimax_m2": FormatModel(
        ("<think>", "</think>", "<minimax:tool_call>"),
        _turns("]~b]ROLE\n", "[e~[\n", "]~b]ai\n<think>\n"),
        seed=5,
    ),
    "minimax_m2_append_think": FormatModel(
        ("<think>", "</think>", "<minimax:tool_call>"),
        _turns("]~b]ROLE\n", "[e~[\n", "]~b]ai\n<think>\n"),
        declared=True,  # a choice of API shape, not of model
        seed=5,
    ),
    "deepseek_v3": FormatModel(
        ("<think>", "</think>", "<｜Assistant｜>"),
        # DeepSeek-V3.1's switch: `thinking` (not `enable_thinking`), off unless asked for.
        _turns("<|ROLE|>", "\n", "<｜Assistant｜>" + V3_SWITCH),
        seed=14,
    ),
    "gemma4": FormatModel(
        ("<|channel>", "<channel|>", "<|turn>", "<turn|>", "<|tool_call>"),
        _turns("<|turn>ROLE\n", "<turn|>\n", "<|turn>model\n" + _switch("<|channel>thought\n", "")),
        special=True,
        seed=14,
    ),
    "nemotron_v3": FormatModel(
        ("<think>", "</think>", "<tool_call>", *CHATML),
        _turns(
            "<|im_start|>ROLE\n",
            "<|im_end|>\n",
            "<|im_start|>assistant\n" + _switch("<think>\n", "<think></think>"),
        ),
        declared=True,
        seed=4,
    ),
    "olmo3": FormatModel(
        ("<think>", "</think>", *CHATML),
        _turns("<|im_start|>ROLE\n", "<|im_end|>\n", "<|im_start|>assistant\n<think>"),
        declared=True,
        seed=6,
    ),
    "step3": FormatModel(
        ("<think>", "</think>"),
        _turns("<|BOT|>ROLE\n", "<|EOT|>", "<|BOT|>assistant\n<think>\n"),
        declared=True,
        seed=20,
    ),
}


# What FORMAT_MODELS are run on (their seeds were chosen on it), and the template switch that
# opens the thinking where a family has it off by default.
FORMAT_QUESTION = "Tom has 3 boxes of 4 pens and buys 5 more pens. How many pens does he have?"
FORMAT_MESSAGES = ({"role": "user", "content": FORMAT_QUESTION},)
THINKING_ON = {"deepseek_v3": {"thinking": True}}


def format_prompt(tokenizer, name: str) -> str:
    """FORMAT_MESSAGES as format `name`'s template renders them (an HF tokenizer): where
    decode's split starts."""
    kwargs = THINKING_ON.get(name, {})
    messages = list(FORMAT_MESSAGES)
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **kwargs
    )


def make_format_model(
    name: str, root: Path, variant: str = "llama", seed: int | None = None
) -> Path:
    """A random-weight checkpoint that writes in format `name`'s markup (FORMAT_MODELS).

    Its tokenizer also has a token for a blank line (the formats' step delimiter), and the
    output rows of that token, of `}` and of a one-token end marker are scaled up (BOOST):
    their logits spread wider, so each wins a good share of positions. A random model otherwise
    writes no steps (forcing while verifying, which cuts a spent step back to its start, would
    keep no thinking; early exit, which probes at step ends, would never probe), no `}` to close
    a probe's `\\boxed{`, and never closes its thinking itself (a run without forcing then never
    reaches an answer). <eos>'s row is zeroed: a logit of 0 never wins greedy decoding, so a run
    is not cut short at random."""
    import json

    from safetensors.torch import load_file, save_file

    spec = FORMAT_MODELS[name]
    path = make_tiny_model(variant, root / name, spec.seed if seed is None else seed)
    tokens = (*spec.tokens, PARAGRAPH)
    special = spec.tokens if spec.special else ()
    add_char_tokenizer(
        path, extra_tokens=tokens, chat_template=spec.template, special_tokens=special
    )
    weights_file = path / "model.safetensors"
    weights = load_file(weights_file)
    head = weights["lm_head.weight"]  # [vocab, hidden]
    first_added = len(head) - len(tokens)
    boosted = [len(head) - 1, CHARS.index("}")]  # PARAGRAPH (the last added token), "}"
    end = get_format(name).think_end
    if end in spec.tokens:  # a one-token end marker: the model may close its thinking itself
        boosted.append(first_added + spec.tokens.index(end))
    for row in boosted:
        head[row] *= BOOST
    head[0] = 0.0
    save_file(weights, weights_file, metadata={"format": "pt"})
    if spec.declared:
        (path / "stepwise.json").write_text(json.dumps({"reasoning_format": name}))
    return path


PARAGRAPH = "\n\n"
BOOST = 6.0


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
