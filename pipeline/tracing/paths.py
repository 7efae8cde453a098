"""The anomaly-path graph (docs/tracing.md): spans of a time window as a weighted directed graph.

Nodes are service instances (service, host and process id). An edge is a call from one
instance to another: a span whose parent span ran in another instance. Each edge keeps its
calls' count, p99 latency, error rate and retries, and weighs

    w = (1 - success rate) * log(p99 latency in ms + 1)

so the heaviest path from an entry point shows where slow, failing jobs went. A path's score is
the sum of its edges' weights; ties (every call succeeded, so every weight is 0) are broken by
the sum of the latency terms log(p99 + 1), so a slow but healthy instance still comes first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipeline.tracing.setup import instance_name

RETRIES = "stepwise.retries"


def node_of(span: dict) -> str:
    return instance_name(span["service"].removeprefix("stepwise-"), span["host"], span["pid"])


def p99(values: list[float]) -> float:
    """Nearest-rank 99th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def edge_weight(success_rate: float, p99_ms: float) -> float:
    """The formula above; success_rate in [0, 1], p99_ms >= 0."""
    if not 0.0 <= success_rate <= 1.0 or p99_ms < 0:
        raise ValueError("success rate must lie in [0, 1] and latency be >= 0")
    return (1.0 - success_rate) * math.log(p99_ms + 1.0)


@dataclass(slots=True)
class Edge:
    src: str
    dst: str
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    retries: int = 0

    @property
    def count(self) -> int:
        return len(self.latencies_ms)

    @property
    def error_rate(self) -> float:
        return self.errors / self.count if self.count else 0.0

    @property
    def p99_ms(self) -> float:
        return p99(self.latencies_ms) if self.latencies_ms else 0.0

    @property
    def weight(self) -> float:
        return edge_weight(1.0 - self.error_rate, self.p99_ms)

    @property
    def latency_term(self) -> float:
        return math.log(self.p99_ms + 1.0)

    def as_dict(self) -> dict:
        return {"src": self.src, "dst": self.dst, "count": self.count,
                "p99_ms": round(self.p99_ms, 3), "error_rate": round(self.error_rate, 4),
                "retries": self.retries, "weight": round(self.weight, 4)}  # fmt: skip


def build_graph(spans: list[dict], since_ns: int = 0, until_ns: int | None = None) -> dict:
    """{(src, dst): Edge} over the spans that started in [since_ns, until_ns)."""
    window = [
        s
        for s in spans
        if s["start_ns"] >= since_ns and (until_ns is None or s["start_ns"] < until_ns)
    ]
    by_id = {s["span_id"]: s for s in window}
    edges: dict[tuple[str, str], Edge] = {}
    for s in window:
        parent = by_id.get(s["parent_id"]) if s["parent_id"] else None
        if parent is None:
            continue
        src, dst = node_of(parent), node_of(s)
        if src == dst:
            continue  # a span inside one process is not a call between instances
        edge = edges.setdefault((src, dst), Edge(src, dst))
        edge.latencies_ms.append((s["end_ns"] - s["start_ns"]) / 1e6)
        edge.errors += s["status"] == "error"
        edge.retries += int(s["attributes"].get(RETRIES, 0) or 0)
    return edges


def heaviest_paths(edges: dict, k: int = 3) -> list[tuple[list[str], float, float]]:
    """The k best simple paths from an entry point (an instance nothing calls), each as (nodes,
    summed weight, summed latency term), best first."""
    out: dict[str, list[Edge]] = {}
    called = set()
    for e in edges.values():
        out.setdefault(e.src, []).append(e)
        called.add(e.dst)
    starts = sorted(set(out) - called) or sorted(out)
    found: list[tuple[list[str], float, float]] = []

    def walk(path: list[str], weight: float, term: float) -> None:
        nxt = [e for e in out.get(path[-1], ()) if e.dst not in path]
        if not nxt and len(path) > 1:
            found.append((list(path), weight, term))
        for e in nxt:
            path.append(e.dst)
            walk(path, weight + e.weight, term + e.latency_term)
            path.pop()

    for s in starts:
        walk([s], 0.0, 0.0)
    found.sort(key=lambda p: (p[1], p[2]), reverse=True)
    return found[:k]


def to_svg(edges: dict, heaviest: list[str] | None = None) -> str:
    """The graph as SVG: instances in columns by their depth from an entry point, each edge
    labelled with its p99, error rate and weight; the heaviest path's edges in red."""
    hot = set(zip(heaviest or [], (heaviest or [])[1:], strict=False))
    nodes = sorted({e.src for e in edges.values()} | {e.dst for e in edges.values()})
    depth = {n: 0 for n in nodes}
    for _ in nodes:  # longest distance from an entry point (bounded: a cycle cannot loop)
        for e in edges.values():
            depth[e.dst] = max(depth[e.dst], min(depth[e.src] + 1, len(nodes)))
    columns: dict[int, list[str]] = {}
    for n in nodes:
        columns.setdefault(depth[n], []).append(n)
    pos = {n: (40 + 260 * d, 50 + 90 * i) for d, col in columns.items() for i, n in enumerate(col)}
    width = 300 + 260 * max(columns, default=0)
    height = 100 + 90 * max((len(c) for c in columns.values()), default=1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="monospace" font-size="11">']  # fmt: skip
    for e in edges.values():
        (x1, y1), (x2, y2) = pos[e.src], pos[e.dst]
        color, stroke = ("#d62728", 3) if (e.src, e.dst) in hot else ("#888", 1.5)
        parts.append(
            f'<line x1="{x1 + 200}" y1="{y1 + 12}" x2="{x2}" y2="{y2 + 12}" stroke="{color}" '
            f'stroke-width="{stroke}"/>'
        )
        label = f"n={e.count} p99={e.p99_ms:.1f}ms err={e.error_rate:.0%} w={e.weight:.2f}"
        tx, ty = (x1 + 200 + x2) / 2 - 60, (y1 + y2) / 2 + 6
        parts.append(f'<text x="{tx}" y="{ty}" fill="{color}">{_esc(label)}</text>')
    for n, (x, y) in pos.items():
        parts.append(f'<rect x="{x}" y="{y}" width="200" height="24" rx="4" fill="#eef" '
                     'stroke="#447"/>')  # fmt: skip
        parts.append(f'<text x="{x + 6}" y="{y + 16}">{_esc(n[:30])}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
