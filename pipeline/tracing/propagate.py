"""A span's context across processes: the W3C `traceparent` (and `tracestate`) in a Kafka
record's headers and in a Celery task's headers, so the spans of every stage join one tree.
`tracestate` also names the calling instance (`stepwise=<stage>@<host>:<pid>`): the callee
then knows which edge of the anomaly-path graph its span is."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_W3C = TraceContextTextMapPropagator()
TRACE_HEADERS = ("traceparent", "tracestate")
STATE_KEY = "stepwise"  # our tracestate entry: the caller instance


def to_headers(context: Context | None = None, caller: str = "") -> dict[str, str]:
    """The current (or given) span's context as W3C headers; {} when nothing is sampled.
    `caller`: this instance, put in `tracestate` for the callee."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    if caller and "traceparent" in carrier:
        state = trace.get_current_span(context).get_span_context().trace_state
        try:
            state = state.delete(STATE_KEY) if STATE_KEY in state else state
            carrier["tracestate"] = state.add(STATE_KEY, caller).to_header()
        except ValueError:  # a name tracestate cannot hold: the edge goes unnamed, not the trace
            pass
    return carrier


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


def caller_of(context: Context) -> str:
    """The instance that handed this context on ("" when it did not say)."""
    span_context = trace.get_current_span(context).get_span_context()
    if not span_context.is_valid:
        return ""
    return span_context.trace_state.get(STATE_KEY, "")
