"""The local span store: every traced process appends its finished spans, one JSON object a
line, to a file of its own in one folder (`STEPWISE_TRACE_DIR`), so a user without a collector
still has traces, and `stepwise trace` / `stepwise paths` read them back."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import msgspec
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

JOB_ID = "stepwise.job_id"  # the attribute that ties a span to its job
_ENCODER = msgspec.json.Encoder(enc_hook=str)


def span_record(span: ReadableSpan) -> dict:
    """A finished span as the store keeps it (ids in W3C hex)."""
    ctx, parent = span.context, span.parent
    resource = dict(span.resource.attributes) if span.resource else {}
    return {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
        "name": span.name,
        "service": resource.get("service.name", ""),
        "host": resource.get("host.name", ""),
        "pid": resource.get("process.pid", 0),
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name.lower(),  # unset / ok / error
        "error": span.status.description or "",
        "attributes": {k: _plain(v) for k, v in (span.attributes or {}).items()},
        "events": [
            {"name": e.name, "ts_ns": e.timestamp, "attributes": dict(e.attributes or {})}
            for e in span.events
        ],
    }


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


class FileSpanExporter(SpanExporter):
    """Appends spans to `<dir>/<host>-<pid>.jsonl` (one writer per file: no interleaving)."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory).expanduser() / f"{socket.gethostname()}-{os.getpid()}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        # msgspec: the export thread shares the GIL with the stage's own work, and encodes a
        # record several times faster than json.dumps (str() for any odd attribute value).
        lines = b"".join(_ENCODER.encode(span_record(s)) + b"\n" for s in spans)
        try:
            with self._lock, self.path.open("ab") as f:
                f.write(lines)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def read_spans(directory: str | Path) -> Iterator[dict]:
    """Every span in the store; a torn last line (a process killed mid-write) is skipped."""
    folder = Path(directory).expanduser()
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
        with path.open() as f:
            for line in f:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue


def trace_of(spans: Iterable[dict], job_id: str) -> list[dict]:
    """All spans of the trace(s) a job's spans belong to, oldest first."""
    spans = list(spans)
    traces = {s["trace_id"] for s in spans if s["attributes"].get(JOB_ID) == job_id}
    return sorted((s for s in spans if s["trace_id"] in traces), key=lambda s: s["start_ns"])
