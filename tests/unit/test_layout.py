"""The house's structure as tests (docs/architecture.md, "The folders"): the package root holds
only the shared contract, no module grows past 400 lines, decode's rooms are the named ones.
The layers between the folders: tests/unit/test_layers.py."""

from __future__ import annotations

from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"
MAX_LINES = 400
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


def test_no_module_is_longer_than_the_limit() -> None:
    long = {
        str(p.relative_to(PIPELINE)): n
        for p in PIPELINE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_decode_has_its_named_rooms() -> None:
    rooms = {p.stem for p in (PIPELINE / "decode").glob("*.py")} - {"__init__"}
    # worker (I/O), core (engine loop) and how it is served and reached, the result builder, a
    # traced job's spans, how a handoff's KV is taken in, the load it reports. The reasoning
    # loop it runs is pipeline/reasoning/, shared with `stepwise eval`.
    assert rooms == {
        "worker", "messages", "core", "core_serve", "core_client",
        "results", "job_trace", "kv_intake", "load",
    }  # fmt: skip


def test_kv_import_sits_beside_kv_export() -> None:
    transfer = {p.name for p in (PIPELINE / "transfer").glob("*.py")}
    assert {"kv_export.py", "kv_import.py"} <= transfer
