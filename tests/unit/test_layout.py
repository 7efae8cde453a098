"""The house's structure as tests (docs/architecture.md, "The folders"): the package root holds
only the shared contract and every folder is on the map. The layers between the folders, which
replaced a line cap and a list of decode's file names (files are sized by what they hold):
tests/unit/test_layers.py."""

from __future__ import annotations

from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"
# The shared contract (schema/ and bus/ are packages beside these) and the package marker.
ROOT_MODULES = {"__init__.py", "config.py", "errors.py", "settings.py", "topics.py"}


def test_the_root_holds_only_the_shared_contract() -> None:
    loose = {p.name for p in PIPELINE.glob("*.py")} - ROOT_MODULES
    assert not loose, f"modules at pipeline/'s root that belong in a folder: {sorted(loose)}"


def test_every_folder_is_a_package_the_architecture_map_names() -> None:
    doc = (PIPELINE.parent / "docs" / "architecture.md").read_text()
    folders = [p for p in PIPELINE.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert len(folders) > 10
    unnamed = [p.name for p in folders if f"`{p.name}/`" not in doc]
    assert not unnamed, f"folders docs/architecture.md does not name: {unnamed}"


def test_kv_import_sits_beside_kv_export() -> None:
    transfer = {p.name for p in (PIPELINE / "transfer").glob("*.py")}
    assert {"kv_export.py", "kv_import.py"} <= transfer
