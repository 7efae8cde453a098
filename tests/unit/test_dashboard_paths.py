"""The dashboard's anomaly-path node graph (docs/tracing.md): a nodeGraph panel beside the
latency heatmap, reading the recording rules of infra/alerts.yml, whose frame after its
transformations is an edges frame as Grafana's node graph reads one (id, source, target,
mainstat, secondarystat; nodes are made from the edges). Grafana itself does not run here."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "infra" / "grafana" / "dashboards" / "stepwise.json").read_text())
RULES = yaml.safe_load((ROOT / "infra" / "alerts.yml").read_text())


def panel(title: str) -> dict:
    return next(p for p in DASHBOARD["panels"] if p["title"] == title)


def recorded() -> dict[str, str]:
    return {r["record"]: r["expr"] for g in RULES["groups"] for r in g["rules"] if "record" in r}


def test_the_node_graph_sits_beside_the_heatmap():
    graph, heatmap = panel("Anomaly paths (traced calls)"), panel("E2E latency heatmap")
    assert graph["type"] == "nodeGraph"
    g, h = graph["gridPos"], heatmap["gridPos"]
    assert g["y"] == h["y"] and g["x"] == h["x"] + h["w"] and g["h"] == h["h"]


def test_no_two_panels_overlap():
    boxes = [p["gridPos"] for p in DASHBOARD["panels"]]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = (
                a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"]
                or a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"]
            )  # fmt: skip
            assert apart, (a, b)


def test_its_queries_are_recorded_edges_with_an_id():
    graph, rules = panel("Anomaly paths (traced calls)"), recorded()
    exprs = {t["refId"]: t["expr"] for t in graph["targets"]}
    assert exprs == {"A": "stepwise:call_edge_weight", "B": "stepwise:call_p99_ms"}
    for t in graph["targets"]:
        assert t["instant"] and t["format"] == "table"  # one row per edge, labels as columns
    # Both carry the edge's id (label_join of source and target), so the merge joins them.
    assert '"id", " -> ", "source", "target"' in rules["stepwise:call_p99_ms"]
    assert rules["stepwise:call_edge_weight"].startswith("stepwise:call_error_ratio *")
    assert '"id"' in rules["stepwise:call_error_ratio"]


def test_after_its_transformations_the_frame_is_a_node_graph_edges_frame():
    graph = panel("Anomaly paths (traced calls)")
    steps = [t["id"] for t in graph["transformations"]]
    assert steps == ["merge", "organize"]
    organize = graph["transformations"][1]["options"]
    # The columns a Prometheus table query gives, as Grafana names them for two queries.
    columns = ["Time", "id", "source", "target", "Value #A", "Value #B"]
    out = [
        organize["renameByName"].get(c, c)
        for c in columns
        if not organize["excludeByName"].get(c, False)
    ]
    assert out == ["id", "source", "target", "mainstat", "secondarystat"]
