"""Model names -> checkpoint directories (a bundled model, a prepared one, or a path), and the
list `stepwise models list` prints. A shipped model is prepared on first use (locally, once)."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.errors import ModelLoadError
from pipeline.formats import detect_format
from pipeline.models.paths import (
    ALIASES,
    KNOWN_MODELS,
    R1_ADAPTER_DIR,
    TINY_REASONER_DIR,
    is_current,
    is_prepared,
    r1_dir,
    smollm2_dir,
)
from pipeline.models.prepare import prepare_r1_reasoner, prepare_smollm2


def resolve_model(name_or_path: str, prepare: bool = True) -> Path:
    """Map a known model name to its directory, else treat the argument as a checkpoint path.

    `smollm2` is converted on first use when `prepare` is true (local, no download).
    """
    name = ALIASES.get(name_or_path.lower(), name_or_path.lower())
    if name == "tiny-reasoner":
        path = TINY_REASONER_DIR
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
        path = r1_dir()
        if not is_current(path):
            if not prepare:
                raise ModelLoadError(
                    f"r1-reasoner is not prepared at {path}; run "
                    "`stepwise models prepare r1-reasoner`",
                    code="model_missing",
                )
            print(f"[stepwise] merging r1-reasoner into {path} (once)", file=sys.stderr)
            path = prepare_r1_reasoner(path)
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
    for name, description in KNOWN_MODELS.items():
        path = {"tiny-reasoner": TINY_REASONER_DIR, "smollm2": smollm2_dir(),
                "r1-reasoner": r1_dir()}[name]  # fmt: skip
        ready = (path / "config.json").is_file()
        if name == "smollm2":
            status = "prepared" if is_prepared(path) else "run `stepwise models prepare smollm2`"
        elif name == "r1-reasoner":
            has_adapter = (R1_ADAPTER_DIR / "adapter.safetensors").is_file()
            current = has_adapter and is_current(path)
            todo = "run `stepwise models prepare r1-reasoner`"
            missing = "no adapter yet (tools/train_r1_reasoner.py)"
            status = "prepared" if current else todo if has_adapter else missing
        else:
            status = "present" if ready else "missing"
        fmt = detect_format(path) if ready else "?"
        rows.append(
            {"name": name, "path": str(path), "status": status, "about": description, "format": fmt}
        )
    return rows
