"""A job's spans as a tree, for `stepwise trace JOB_ID`: what ran where, when and for how long."""

from __future__ import annotations

from pipeline.tracing.store import JOB_ID

# Attributes worth a line's room (the rest are in --json).
SHOWN = (JOB_ID, "stepwise.index", "stepwise.step", "stepwise.verdict", "stepwise.level",
         "stepwise.hit", "stepwise.transport", "stepwise.bytes", "stepwise.batch_size",
         "stepwise.solver_ms", "stepwise.fallback", "stepwise.backtracks")  # fmt: skip


def build(spans: list[dict]) -> list[dict]:
    """Nested {span..., "children": [...]} trees, roots first by start time; a span whose
    parent is not among `spans` (another job's, or not sampled) is a root."""
    ids = {s["span_id"] for s in spans}
    nodes = {s["span_id"]: {**s, "children": []} for s in spans}
    roots = []
    for s in sorted(spans, key=lambda s: s["start_ns"]):
        node = nodes[s["span_id"]]
        if s["parent_id"] in ids and s["parent_id"] != s["span_id"]:
            nodes[s["parent_id"]]["children"].append(node)
        else:
            roots.append(node)
    return roots


def _ms(ns: int) -> float:
    return ns / 1e6


def render(roots: list[dict]) -> list[str]:
    """One line a span: offset from the trace's start, duration, name, process, status,
    the attributes in SHOWN, then its events."""
    if not roots:
        return []
    t0 = min(r["start_ns"] for r in roots)
    lines: list[str] = []

    def walk(node: dict, depth: int) -> None:
        dur = _ms(node["end_ns"] - node["start_ns"])
        attrs = " ".join(
            f"{k.removeprefix('stepwise.')}={node['attributes'][k]}"
            for k in SHOWN
            if k in node["attributes"] and k != JOB_ID
        )
        status = " ERROR: " + node["error"] if node["status"] == "error" else ""
        where = f"{node['service'].removeprefix('stepwise-')}@{node['host']}:{node['pid']}"
        lines.append(
            f"{_ms(node['start_ns'] - t0):9.1f} ms {dur:9.1f} ms  {'  ' * depth}{node['name']}"
            f"  [{where}]{(' ' + attrs) if attrs else ''}{status}"
        )
        for e in node["events"]:
            detail = " ".join(f"{k}={v}" for k, v in e["attributes"].items())
            lines.append(
                f"{_ms(e['ts_ns'] - t0):9.1f} ms {'':>12}  {'  ' * depth}  * {e['name']} {detail}"
            )
        for child in sorted(node["children"], key=lambda c: c["start_ns"]):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return lines
