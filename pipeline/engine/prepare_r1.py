"""`stepwise models prepare r1-reasoner`: SmolLM2 with the R1-style LoRA adapter merged in.

The adapter (`pipeline/assets/r1-lora/`: `adapter.safetensors`, `adapter_config.json`, written
by `tools/train_r1_reasoner.py`) is a few MB in the repo; the base is the converted SmolLM2
(`prepare.prepare_smollm2`). Merging adds `(alpha / rank) * B @ A` into the base's attention
weights and writes a plain HF directory (the engine and transformers load it like any other),
with `stepwise.json` naming its reasoning format: `qwen3` (the model writes `<think>` itself).
A directory merged from another adapter (its sha256 in `stepwise.json`) is merged again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from pipeline.engine.prepare import (
    ASSETS_DIR,
    is_prepared,
    models_dir,
    prepare_smollm2,
    write_model_dir,
)
from pipeline.errors import ModelLoadError

R1_ADAPTER_DIR = ASSETS_DIR / "r1-lora"
R1_DIRNAME = "r1-reasoner"
R1_FORMAT = "qwen3"


def r1_dir() -> Path:
    return models_dir() / R1_DIRNAME


def adapter_sha(adapter_dir: Path = R1_ADAPTER_DIR) -> str:
    return hashlib.sha256((adapter_dir / "adapter.safetensors").read_bytes()).hexdigest()


def is_current(path: Path, adapter_dir: Path = R1_ADAPTER_DIR) -> bool:
    """Prepared from this adapter (a retrained adapter is merged again)."""
    marker = path / "stepwise.json"
    if not is_prepared(path) or not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("adapter_sha256") == adapter_sha(adapter_dir)
    except (OSError, ValueError):
        return False


def prepare_r1_reasoner(
    dest: Path | None = None,
    force: bool = False,
    base: Path | None = None,
    adapter_dir: Path = R1_ADAPTER_DIR,
) -> Path:
    """Merge the adapter into the base, once per adapter; a clear error if it is missing."""
    import torch
    from safetensors.torch import load_file, save_file

    from pipeline.engine.lora import merge_lora

    if not (adapter_dir / "adapter.safetensors").is_file():
        raise ModelLoadError(
            f"no R1-style adapter at {adapter_dir}: train one with tools/train_r1_reasoner.py",
            code="model_missing",
        )
    dest = Path(dest).expanduser() if dest is not None else r1_dir()
    if not force and is_current(dest, adapter_dir):
        return dest
    base = base or prepare_smollm2()
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    weights = load_file(str(base / "model.safetensors"))
    adapter = load_file(str(adapter_dir / "adapter.safetensors"))
    merged = merge_lora(weights, adapter, int(config["rank"]), float(config["alpha"]))

    def fill(tmp: Path) -> None:
        shutil.copytree(base, tmp, ignore=shutil.ignore_patterns("model.safetensors", "*.tmp*"))
        tensors = {k: v.contiguous().to(torch.float32) for k, v in merged.items()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        marker = {
            "reasoning_format": R1_FORMAT,
            "adapter_sha256": adapter_sha(adapter_dir),
            "adapter_step": config.get("step"),
        }
        (tmp / "stepwise.json").write_text(json.dumps(marker, indent=2) + "\n")

    return write_model_dir(dest, fill)
