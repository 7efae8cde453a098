"""One settings object per process: every STEPWISE_* read lives in pipeline/settings.py."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import settings
from pipeline.budget.config import budget_config
from pipeline.cli import declarations  # noqa: F401  (every declaring module: all settings)
from pipeline.config import PipelineConfig
from pipeline.gateway.config import GatewayConfig
from pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def env_reads_outside_settings() -> list[str]:
    """file:line of every environment access in pipeline/ outside settings.py that could read
    a STEPWISE_* variable: only a named other variable (CC, VLLM_*) and a whole copy of the
    environment for a child ({**os.environ, ...}) pass."""
    found = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        if path == ROOT / "pipeline" / "settings.py":
            continue
        tree = ast.parse(path.read_text())
        judged = set()  # environ nodes whose access was judged by its key
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):  # {**os.environ}: a copy handed to a child
                judged |= {id(v) for k, v in zip(node.keys, node.values, strict=True) if k is None}
                continue
            key = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if _is_environ(node.func.value):
                    judged.add(id(node.func.value))
                    key = node.args[0] if node.args else None
                elif node.func.attr == "getenv":
                    key = node.args[0] if node.args else None
                else:
                    continue
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                judged.add(id(node.value))
                key = node.slice
            else:
                continue
            named = isinstance(key, ast.Constant) and isinstance(key.value, str)
            if not named or key.value.startswith(settings.PREFIX):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        found += [
            f"{path.relative_to(ROOT)}:{n.lineno}"
            for n in ast.walk(tree)
            if _is_environ(n) and id(n) not in judged
        ]
    return found


def test_no_stepwise_variable_is_read_outside_the_settings_module():
    assert env_reads_outside_settings() == []


def test_every_variable_the_docs_name_is_known():
    lines = [ln for p in (ROOT / "docs").glob("*.md") for ln in p.read_text().splitlines()]
    lines = [ln for ln in lines if "unknown setting" not in ln]  # the typo in the example
    named = {w.strip("`$=,.:;()?'\"") for ln in lines for w in ln.split()}
    named = {n.split("=")[0] for n in named if n.startswith(settings.PREFIX)}
    known = {v.env for v in settings.declared_vars()}
    known |= {settings.PREFIX + k for k in settings.ELSEWHERE}
    assert named - known - {settings.PREFIX, "STEPWISE_*"} == set()


def test_flag_over_env_over_default_with_sources():
    s = Settings.load(
        env={"STEPWISE_MODEL": "smollm2", "STEPWISE_MAX_RETRIES": "3", "STEPWISE_ENGINE": ""},
        flags={"MODEL": "r1-reasoner", "ENGINE": None},
    )
    assert (s["MODEL"], s.source("MODEL")) == ("r1-reasoner", "flag")
    assert (s["MAX_RETRIES"], s.source("MAX_RETRIES")) == (3, "env")
    assert (s["ENGINE"], s.source("ENGINE")) == ("native", "default")  # empty: unset
    config = PipelineConfig.from_settings(s)
    assert (config.model, config.max_retries, config.engine) == ("r1-reasoner", 3, "native")


def test_bad_values_name_the_variable():
    with pytest.raises(ValueError, match="STEPWISE_MAX_RETRIES must be an integer"):
        Settings.load(env={"STEPWISE_MAX_RETRIES": "many"})
    with pytest.raises(ValueError, match="STEPWISE_KERNELS='cuda': expected one of"):
        Settings.load(env={"STEPWISE_KERNELS": "cuda"})
    with pytest.raises(ValueError, match="STEPWISE_WS_DEFLATE must be"):
        Settings.load(env={"STEPWISE_WS_DEFLATE": "maybe"})


def test_unknown_variables_are_reported_with_the_nearest_name():
    s = Settings.load(env={"STEPWISE_KAKFA": "k:1", "STEPWISE_TEST_KAFKA": "k:2", "HOME": "/"})
    assert s.unknown == ("STEPWISE_KAKFA",)
    assert s.unknown_report() == [
        "unknown setting STEPWISE_KAKFA is ignored (did you mean STEPWISE_KAFKA?)"
    ]


def test_concern_configs_from_settings():
    s = Settings.load(
        env={
            "STEPWISE_REDIS": "redis://r:1/0",
            "STEPWISE_API_KEYS": "k1:a,k2:b",
            "STEPWISE_TENANT_RATE": "2.5",
            "STEPWISE_GATEWAY_PORT": "9001",
            "STEPWISE_SLO_MS": "15000",
        }
    )
    gw = GatewayConfig.from_settings(s)
    assert (gw.port, gw.api_keys, gw.tenant_limit.rate, gw.tenant_limit.burst) == (
        9001, {"k1": "a", "k2": "b"}, 2.5, 3,
    )  # fmt: skip
    assert gw.pipeline.redis == "redis://r:1/0"
    assert budget_config(s).interactive.slo_p95_ms == 15000


def test_child_env_carries_what_is_not_default(monkeypatch):
    s = Settings.load(env={"STEPWISE_MAX_RETRIES": "3"}, flags={"MODEL": "smollm2"})
    env = s.child_env(base={"PATH": "/bin"}, KAFKA="k:1")
    assert env == {
        "PATH": "/bin",
        "STEPWISE_MAX_RETRIES": "3",
        "STEPWISE_MODEL": "smollm2",
        "STEPWISE_KAFKA": "k:1",
    }
    again = Settings.load(env=env)
    assert (again["MODEL"], again["MAX_RETRIES"], again["KAFKA"]) == ("smollm2", 3, "k:1")


def test_secrets_are_not_shown():
    rows = {r["variable"]: r for r in Settings.load(env={"STEPWISE_API_KEYS": "k:a"}).rows()}
    assert rows["STEPWISE_API_KEYS"]["value"] == "(set)"
    assert rows["STEPWISE_API_KEYS"]["source"] == "env"


def test_monkeypatched_variables_reach_current(monkeypatch):
    monkeypatch.setenv("STEPWISE_KERNELS", "torch")
    assert settings.current()["KERNELS"] == "torch"
    monkeypatch.delenv("STEPWISE_KERNELS")
    assert settings.current()["KERNELS"] == "auto"


def _cli(*args, env=None):
    base = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        capture_output=True, text=True, env=base, cwd=ROOT, timeout=60,
    )  # fmt: skip


def test_stepwise_config_prints_values_and_sources():
    out = _cli("config", "--json", env={"STEPWISE_MAX_RETRIES": "5", "STEPWISE_MODLE": "x"})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    rows = {r["variable"]: r for r in got["settings"]}
    assert (rows["STEPWISE_MAX_RETRIES"]["value"], rows["STEPWISE_MAX_RETRIES"]["source"]) == (
        "5", "env",
    )  # fmt: skip
    assert rows["STEPWISE_KAFKA"]["source"] == "default"
    assert got["unknown"] == ["STEPWISE_MODLE"]
    table = _cli("config", env={"STEPWISE_MODLE": "x"})
    assert "did you mean STEPWISE_MODEL?" in table.stdout


def test_a_bad_value_stops_the_cli_with_its_name():
    out = _cli("config", env={"STEPWISE_GATEWAY_PORT": "eighty"})
    assert out.returncode == 2
    assert "STEPWISE_GATEWAY_PORT" in out.stderr and "Traceback" not in out.stderr


def test_unknown_variables_are_warned_at_start_up():
    out = _cli("submit", "1 + 1", env={"STEPWISE_KAKFA": "x"})
    assert "warning: unknown setting STEPWISE_KAKFA is ignored" in out.stderr


def test_every_setting_is_in_the_configuration_doc():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert [v.env for v in settings.declared_vars() if f"`{v.env}`" not in doc] == []


def test_a_setting_declared_once_is_read_from_env_flag_and_shown(monkeypatch):
    """A new setting is one field: the environment, its flag, `stepwise config`'s rows and the
    config object all follow from the declaration."""
    import argparse
    from dataclasses import dataclass

    from pipeline.cli.parser import add_setting_flags

    monkeypatch.setattr(settings, "_DECLARED", dict(settings._DECLARED))  # undone after

    @settings.declared
    @dataclass
    class WidgetConfig:
        widgets: int = settings.setting(
            4, env="TEST_WIDGETS", concern="test", help="how many widgets", flag="--widgets"
        )
        colour: str = settings.setting(
            "red", env="TEST_COLOUR", concern="test", help="their colour", choices=("red", "blue")
        )

    assert settings.build(WidgetConfig, Settings.load(env={})) == WidgetConfig(4, "red")
    s = Settings.load(env={"STEPWISE_TEST_WIDGETS": "7", "STEPWISE_TEST_COLOUR": "Blue"})
    assert settings.build(WidgetConfig, s) == WidgetConfig(7, "blue")
    parser = argparse.ArgumentParser()
    add_setting_flags(parser)
    args = parser.parse_args(["--widgets", "9"])
    flags = {v.name: getattr(args, v.name, None) for v in settings.declared_vars() if v.flag}
    s = Settings.load(env={"STEPWISE_TEST_WIDGETS": "7"}, flags=flags)
    assert (settings.build(WidgetConfig, s).widgets, s.source("TEST_WIDGETS")) == (9, "flag")
    rows = {r["variable"]: r for r in s.rows()}
    assert (rows["STEPWISE_TEST_COLOUR"]["value"], rows["STEPWISE_TEST_COLOUR"]["source"]) == (
        "red", "default",
    )  # fmt: skip
    with pytest.raises(ValueError, match="STEPWISE_TEST_COLOUR='green': expected one of"):
        Settings.load(env={"STEPWISE_TEST_COLOUR": "green"})
