"""A span's context across processes: the W3C `traceparent` (and `tracestate`) in a Kafka
record's headers and in a Celery task's headers, so the spans of every stage join one tree."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_W3C = TraceContextTextMapPropagator()
TRACE_HEADERS = ("traceparent", "tracestate")


def to_headers(context: Context | None = None) -> dict[str, str]:
    """The current (or given) span's context as W3C headers; {} when nothing is sampled."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    return carrier


def kafka_headers(context: Context | None = None) -> list[tuple[str, bytes]]:
    """The same, as aiokafka record headers."""
    return [(k, v.encode()) for k, v in to_headers(context).items()]


def from_headers(headers: Mapping[str, str] | Iterable[tuple[str, bytes | str]] | None) -> Context:
    """The context a record or task carries (an empty one when it carries none)."""
    if not headers:
        return Context()
    items = headers.items() if isinstance(headers, Mapping) else headers
    carrier = {
        k.lower(): (v.decode("latin-1") if isinstance(v, bytes) else str(v))
        for k, v in items
        if k.lower() in TRACE_HEADERS and v is not None
    }
    return _W3C.extract(carrier)
