"""Build a CausalLM from a Hugging Face checkpoint directory (safetensors)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from pipeline.engine.model import CausalLM
from pipeline.engine.model_config import ModelConfig
from pipeline.engine.rope import RotaryEmbedding
from pipeline.errors import ModelLoadError

# checkpoint name fragment -> (fused parameter fragment, shard index)
FUSED = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}


def _safetensors_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        files = [path / n for n in names]
    else:
        files = sorted(path.glob("*.safetensors"))
    missing = [f for f in files if not f.is_file()]
    if not files or missing:
        raise ModelLoadError(
            f"{path} has no usable *.safetensors weights"
            + (f" (missing: {', '.join(m.name for m in missing)})" if missing else "")
        )
    return files


def _shard_slice(model: CausalLM, fused: str, shard: int) -> tuple[int, int]:
    cfg = model.config
    if fused == "qkv_proj":
        q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        starts = (0, q, q + kv)
        sizes = (q, kv, kv)
    else:
        starts = (0, cfg.intermediate_size)
        sizes = (cfg.intermediate_size, cfg.intermediate_size)
    return starts[shard], sizes[shard]


def load_model(
    path: str | Path, dtype: torch.dtype, device: torch.device, max_position: int
) -> CausalLM:
    """Load weights into a freshly built model; every parameter must be covered."""
    path = Path(path)
    cfg = ModelConfig.from_dir(path)
    with torch.device("meta"):
        model = CausalLM(cfg, max_position)
    model = model.to_empty(device=device).to(dtype)
    if cfg.tie_word_embeddings:  # to_empty() gives each module its own tensor: re-tie
        model.lm_head.weight = model.embed_tokens.weight
    # Rotary tables are buffers computed at construction: rebuild them off the meta device.
    rope = RotaryEmbedding(cfg.head_dim, max_position, cfg.rope_theta, cfg.rope_scaling)
    model.rotary = rope.to(device)
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    for file in _safetensors_files(path):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                if "rotary_emb" in name:
                    continue
                target = name.removeprefix("model.")
                tensor = f.get_tensor(name)
                key = target.rsplit(".", 2)  # [..., proj, weight|bias]
                if len(key) == 3 and key[1] in FUSED:
                    fused, shard = FUSED[key[1]]
                    pname = f"{key[0]}.{fused}.{key[2]}"
                    if pname not in params:
                        raise ModelLoadError(f"unexpected tensor {name} in {file.name}")
                    start, size = _shard_slice(model, fused, shard)
                    with torch.no_grad():
                        params[pname][start : start + size].copy_(tensor)
                    loaded.add(f"{pname}#{shard}")
                    continue
                if target not in params:
                    if target == "lm_head.weight" and cfg.tie_word_embeddings:
                        continue
                    raise ModelLoadError(f"unexpected tensor {name} in {file.name}")
                if params[target].shape != tensor.shape:
                    raise ModelLoadError(
                        f"{name}: shape {tuple(tensor.shape)} != "
                        f"expected {tuple(params[target].shape)}"
                    )
                with torch.no_grad():
                    params[target].copy_(tensor)
                loaded.add(target)
    expected = set()
    for pname in params:
        frag = pname.rsplit(".", 2)[-2]
        if frag == "qkv_proj":
            expected |= {f"{pname}#{i}" for i in range(3)}
        elif frag == "gate_up_proj":
            expected |= {f"{pname}#{i}" for i in range(2)}
        else:
            expected.add(pname)
    if cfg.tie_word_embeddings:
        expected.discard("lm_head.weight")
    missing = sorted(expected - loaded)
    if missing:
        raise ModelLoadError(f"checkpoint {path} lacks {len(missing)} tensors, e.g. {missing[:4]}")
    return model.eval()
