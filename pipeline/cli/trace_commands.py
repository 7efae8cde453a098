"""`stepwise trace JOB_ID` and `stepwise paths`: a job's span tree, and the anomaly-path graph,
from the local span store (docs/tracing.md)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pipeline.errors import InvalidRequestError
from pipeline.settings import build
from pipeline.tracing import paths, store, tree
from pipeline.tracing.setup import TracingConfig


def _store(args: argparse.Namespace) -> str:
    return args.dir or build(TracingConfig).trace_dir


def cmd_trace(args: argparse.Namespace) -> int:
    folder = _store(args)
    spans = store.trace_of(store.read_spans(folder), args.job_id)
    if not spans:
        raise InvalidRequestError(
            f"no spans of job {args.job_id!r} in {folder} (was it traced? STEPWISE_TRACE_SAMPLE)"
        )
    roots = tree.build(spans)
    if args.json:
        print(json.dumps({"job_id": args.job_id, "spans": len(spans), "tree": roots}, indent=1))
        return 0
    processes = {(s["host"], s["pid"]) for s in spans}
    print(f"job {args.job_id}: {len(spans)} spans from {len(processes)} processes")
    for line in tree.render(roots):
        print(line)
    return 0


def cmd_paths(args: argparse.Namespace) -> int:
    since = int((time.time() - args.window_s) * 1e9) if args.window_s else 0
    edges = paths.build_graph(list(store.read_spans(_store(args))), since_ns=since)
    if not edges:
        raise InvalidRequestError("no calls between instances in the window (no traced jobs?)")
    best = paths.heaviest_paths(edges, k=args.top)
    if args.svg:
        Path(args.svg).write_text(paths.to_svg(edges, best[0][0] if best else None))
    if args.json:
        heaviest = [{"path": p, "weight": w, "latency_term": t} for p, w, t in best]
        out = {"edges": [e.as_dict() for e in edges.values()], "heaviest": heaviest}
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'weight':>8} {'p99 ms':>9} {'err':>6} {'calls':>6} {'retries':>7}  edge")
    for e in sorted(edges.values(), key=lambda e: (e.weight, e.latency_term), reverse=True):
        print(f"{e.weight:8.3f} {e.p99_ms:9.1f} {e.error_rate:6.1%} {e.count:6d} {e.retries:7d}"
              f"  {e.src} -> {e.dst}")  # fmt: skip
    for i, (p, w, t) in enumerate(best, 1):
        print(f"heaviest path {i} (weight {w:.3f}, latency term {t:.2f}): {' -> '.join(p)}")
    if args.svg:
        print(f"graph written to {args.svg}")
    return 0
