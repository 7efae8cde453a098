"""The package's layers hold by design (docs/architecture.md, "Layers"): the contract in
pyproject.toml's [tool.importlinter] is kept, no module of `pipeline` imports another inside a
function to dodge it, and no two modules import each other, directly or around a loop."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "pipeline"

# Imports a function may make: optional or heavy dependencies a process needs only on one path,
# each with why. Everything else is imported at the top of its module.
LAZY_ALLOWED = {
    "torch": "the control plane (ingest, budget, gateway, verify) never loads it",
    "transformers": "as torch: loaded by the engine and model preparation only",
    "safetensors": "as torch",
    "triton": "GPU kernels: only where a CUDA device is",
    "reasoning_gym": "a dev extra: `stepwise eval --tasks rg:*` only",
    "mooncake": "an optional extra: the `mooncake` KV transport only",
    "opentelemetry.exporter": "protobuf and an HTTP client, only when an OTLP endpoint is set",
}


def function_level_imports() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(PIPELINE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["." * node.level + (node.module or "")]
                else:
                    continue
                rel = str(path.relative_to(ROOT))
                found += [(rel, node.lineno, name) for name in names]
    return sorted(set(found))


def test_the_import_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run(
        [str(lint), "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Contracts: 1 kept, 0 broken." in out.stdout


def test_no_module_imports_the_package_inside_a_function():
    inside = [f for f in function_level_imports() if f[2].startswith(("pipeline", "."))]
    assert inside == [], "imports of pipeline modules inside functions (dodging a layer?)"


def test_only_optional_heavy_dependencies_are_imported_lazily():
    lazy = [f for f in function_level_imports() if not f[2].startswith(("pipeline", "."))]
    unexplained = [f for f in lazy if not f[2].startswith(tuple(LAZY_ALLOWED))]
    assert unexplained == [], "import these at the top, or say in LAZY_ALLOWED why not"
    assert lazy, "the heavy dependencies are imported lazily somewhere (else drop the list)"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_strongly_connected_finds_a_loop_and_only_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_no_two_modules_import_each_other():
    g = grimp.build_graph("pipeline", exclude_type_checking_imports=True)
    modules = set(g.modules)
    graph = {m: set(g.find_modules_directly_imported_by(m)) & modules for m in modules}
    sys.setrecursionlimit(10_000)
    assert strongly_connected(graph) == []
