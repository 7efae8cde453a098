"""infra/alerts.yml: well-formed Prometheus alerting and recording rules on exported metrics,
loaded by the compose Prometheus, each alert with its action: a structural check, and
`promtool` (Debian's `prometheus` package, installed by scripts/setup.sh) checking the file and
running tests/unit/promtool/alerts_test.yml, where each alert fires in its corner and not beside
it and the anomaly-path recording rules compute the edge weight."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from pipeline import telemetry

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "infra" / "alerts.yml"
METRIC = re.compile(r"\bstepwise_[a-z0-9_]+")
SUFFIXES = ("_bucket", "_count", "_sum")
ACTIONS = {"circuit_break", "snapshot_paths"}
DURATION = re.compile(r"^\d+[smh]$")


def all_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def rules() -> list[dict]:
    """The alerting rules."""
    return [r for r in all_rules() if "alert" in r]


def promtool(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    assert exe, "promtool is missing: scripts/setup.sh installs it (apt-get install prometheus)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def balanced(expr: str) -> bool:
    depth = {"(": 0, "[": 0, "{": 0}
    close = {")": "(", "]": "[", "}": "{"}
    for ch in expr:
        if ch in depth:
            depth[ch] += 1
        elif ch in close:
            depth[close[ch]] -= 1
            if depth[close[ch]] < 0:
                return False
    return not any(depth.values())


def test_every_rule_is_complete_and_names_its_action() -> None:
    found = rules()
    assert {r["alert"] for r in found} >= {"StepwiseStageSlowUnderLoad", "StepwiseStageLatencyJump"}
    for r in found:
        assert set(r) == {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert DURATION.match(r["for"]), r["alert"]
        assert r["labels"]["action"] in ACTIONS and r["labels"]["severity"] in (
            "warning",
            "critical",
        )
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        assert balanced(r["expr"]), r["alert"]


def test_rules_query_only_exported_metrics() -> None:
    known = set(telemetry.METRIC_NAMES)
    recorded = {r["record"] for r in all_rules() if "record" in r}
    assert recorded >= {"stepwise:call_p99_ms", "stepwise:call_edge_weight"}
    for r in all_rules():
        names = set(METRIC.findall(r["expr"]))
        assert names or "record" in r, r
        for name in names:
            base = next((name.removesuffix(s) for s in SUFFIXES if name.endswith(s)), name)
            assert base in known, (r.get("alert") or r["record"], name)
        for name in re.findall(r"\bstepwise:[a-z0-9_]+", r["expr"]):
            assert name in recorded, name  # a recording rule reads only what another records


def test_promtool_accepts_the_rules() -> None:
    out = promtool("check", "rules", str(ALERTS))
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_alerts_fire_in_their_corners_and_the_edge_weight_is_the_formula() -> None:
    cases = Path(__file__).parent / "promtool" / "alerts_test.yml"
    out = promtool("test", "rules", str(cases))
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_thresholds_are_the_documented_ones() -> None:
    by = {r["alert"]: r["expr"] for r in rules()}
    assert "> 0.5" in by["StepwiseStageSlowUnderLoad"]  # 500 ms, high traffic
    jump = by["StepwiseStageLatencyJump"]
    assert "> 0.1" in jump and "> 4 *" in jump and "offset 10m" in jump  # 100 ms, +300%


def test_the_compose_prometheus_loads_them() -> None:
    prometheus = yaml.safe_load((ROOT / "infra" / "prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["/etc/prometheus/alerts.yml"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert (
        "./infra/alerts.yml:/etc/prometheus/alerts.yml:ro"
        in compose["services"]["prometheus"]["volumes"]
    )


def test_the_compose_stack_sends_traces_to_its_jaeger_and_grafana_reads_it() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    for name in ("ingest", "prefill", "decode", "verify"):
        env = services[name]["environment"]
        assert env["STEPWISE_OTLP_ENDPOINT"] == "http://jaeger:4318", name
        assert env["STEPWISE_TRACE_SAMPLE"] == "${STEPWISE_TRACE_SAMPLE:-0}", name  # off by default
    datasources = ROOT / "infra" / "grafana" / "provisioning" / "datasources" / "jaeger.yml"
    (jaeger,) = yaml.safe_load(datasources.read_text())["datasources"]
    assert jaeger["type"] == "jaeger" and jaeger["url"] == "http://jaeger:16686"
