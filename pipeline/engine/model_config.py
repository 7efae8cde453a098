"""The subset of a Hugging Face `config.json` the decoder needs, validated on load."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import ModelLoadError, UnsupportedModelError

# architecture -> (family, attention bias default, q/k norm)
ARCHITECTURES: dict[str, tuple[str, bool, bool]] = {
    "LlamaForCausalLM": ("llama", False, False),
    "MistralForCausalLM": ("mistral", False, False),
    "Qwen2ForCausalLM": ("qwen2", True, False),
    "Qwen3ForCausalLM": ("qwen3", False, True),
}


@dataclass(slots=True)
class ModelConfig:
    architecture: str
    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    rope_theta: float
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    attention_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    tie_word_embeddings: bool = False
    sliding_window: int | None = None

    def max_model_len(self, requested: int | None = None, *, windowed: bool = True) -> int:
        """The longest sequence (prompt + generated tokens) an engine may run on this model:
        its position limit, inside its sliding window when `windowed` (the native engine has
        no sliding-window attention; vLLM does, so its backend passes False), and inside
        `requested` (EngineConfig.max_model_len) when given. The one place this is decided:
        the engines and ingest's prompt check all ask here."""
        limit = self.max_position_embeddings
        if windowed and self.sliding_window:
            limit = min(limit, self.sliding_window)
        return min(requested or limit, limit)

    torch_dtype: str | None = None
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None

    @classmethod
    def from_dict(cls, cfg: dict[str, Any], *, native: bool = True) -> ModelConfig:
        """`native`: for the native engine, which runs only ARCHITECTURES; the vLLM engine
        runs any architecture vLLM does, and needs only the sizes and limits from here."""
        archs = cfg.get("architectures") or []
        arch = next((a for a in archs if a in ARCHITECTURES), None)
        if arch is None and native:
            raise UnsupportedModelError(
                f"unsupported architecture {archs or cfg.get('model_type')!r}: the native "
                f"engine cannot run it (supported: {', '.join(sorted(ARCHITECTURES))}); serve "
                "it through vLLM instead: `stepwise up --engine vllm --model DIR` "
                "(or STEPWISE_ENGINE=vllm; docs/vllm.md)"
            )
        if arch is None:
            arch = str(archs[0] if archs else cfg.get("model_type", "unknown"))
            if isinstance(cfg.get("text_config"), dict):  # a multimodal config: its text model
                cfg = {**cfg["text_config"], **cfg}
        family, bias_default, qk_norm = ARCHITECTURES.get(arch, ("", False, False))
        try:
            hidden = int(cfg["hidden_size"])
            heads = int(cfg["num_attention_heads"])
            # transformers >= 5 nests theta and scaling in `rope_parameters`; older configs
            # keep `rope_theta` and `rope_scaling` at the top level.
            rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
            theta = float(rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
            rope_type = rope.get("rope_type", rope.get("type", "default"))
            rope["rope_type"] = rope_type
            if rope_type in ("llama3", "yarn", "longrope"):
                rope.setdefault(
                    "original_max_position_embeddings", cfg.get("max_position_embeddings")
                )
            partial = float(rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1)))
            if native and partial != 1:
                raise UnsupportedModelError(
                    "partial rotary embeddings are not supported by the native engine; "
                    "serve this model with `--engine vllm`"
                )
            sliding = cfg.get("sliding_window")
            if family == "qwen2" and not cfg.get("use_sliding_window", False):
                sliding = None
            eos = cfg.get("eos_token_id")
            eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
            return cls(
                architecture=arch,
                family=family,
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
                rope_theta=theta,
                rope_scaling=rope,
                attention_bias=bool(cfg.get("attention_bias", bias_default)),
                mlp_bias=bool(cfg.get("mlp_bias", False)),
                qk_norm=qk_norm,
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                sliding_window=int(sliding) if sliding else None,
                torch_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
                eos_token_ids=eos_ids,
                bos_token_id=cfg.get("bos_token_id"),
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, UnsupportedModelError):
                raise
            raise ModelLoadError(f"config.json is missing or has a bad field: {e}") from e

    @classmethod
    def from_dir(cls, path: str | Path, *, native: bool = True) -> ModelConfig:
        path = Path(path)
        if not path.is_dir():
            raise ModelLoadError(f"model directory not found: {path}")
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise ModelLoadError(f"{path} has no config.json (not a Hugging Face checkpoint dir)")
        try:
            cfg = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as e:
            raise ModelLoadError(f"{cfg_file} is not valid JSON: {e}") from e
        return cls.from_dict(cfg, native=native)
