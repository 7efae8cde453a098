"""infra/alerts.yml: well-formed Prometheus alerting rules on exported metrics, loaded by the
compose Prometheus, each with its action (no Docker or promtool needed: a structural check,
and every PromQL expression's brackets and metric names)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from pipeline import telemetry

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "infra" / "alerts.yml"
METRIC = re.compile(r"\bstepwise_[a-z0-9_]+")
SUFFIXES = ("_bucket", "_count", "_sum")
ACTIONS = {"circuit_break", "snapshot_paths"}
DURATION = re.compile(r"^\d+[smh]$")


def rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


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
    for r in rules():
        names = set(METRIC.findall(r["expr"]))
        assert names, r["alert"]
        for name in names:
            base = next((name.removesuffix(s) for s in SUFFIXES if name.endswith(s)), name)
            assert base in known, (r["alert"], name)


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
