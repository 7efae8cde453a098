"""Span helpers the stages share: a job's span opened from the context a message carries, its
context handed on in headers, child spans inside one process, its end with the outcome. With
tracing off every call is the OpenTelemetry no-op (no span is recorded, no header is written).

A span whose parent ran in another process is a *call* between two instances of the
anomaly-path graph (docs/tracing.md). The caller names itself in the W3C `tracestate` it hands
on (`stepwise=<stage>@<host>:<pid>`), so the callee knows the edge when the span ends and
records it as a Prometheus series (`stepwise_trace_call_seconds{source,target}`): the
dashboard's node graph reads those, `stepwise paths` reads the spans themselves.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from pipeline import telemetry
from pipeline.tracing import propagate, setup
from pipeline.tracing.setup import tracer
from pipeline.tracing.store import JOB_ID

CALLER = "stepwise.caller"  # the calling instance, on a span whose parent ran elsewhere
RETRIES = "stepwise.retries"


def start_job_span(
    name: str,
    job_id: str,
    headers=None,
    start_ns: int | None = None,
    root: bool = True,
    **attributes: object,
) -> Span:
    """A span of job `job_id`, child of the context in `headers` (Kafka or Celery headers);
    `root=False`: only as a child (a verify check of a job that is not traced is not traced).
    Tracing off: the invalid span at once (no header parsed, no attributes built), since every
    record of every stage comes through here."""
    if not setup.enabled():
        return trace.INVALID_SPAN
    parent = propagate.from_headers(headers)
    if not root and not trace.get_current_span(parent).get_span_context().is_valid:
        return trace.INVALID_SPAN
    attrs = {JOB_ID: job_id, **{f"stepwise.{k}": v for k, v in attributes.items() if v is not None}}
    caller = propagate.caller_of(parent)
    if caller:
        attrs[CALLER] = caller
    return tracer().start_span(name, context=parent, start_time=start_ns, attributes=attrs)


def start_child(parent: Span, name: str, start_ns: int | None = None, **attributes: object) -> Span:
    """A span inside this process under `parent` (a step of decode's span, a cache lookup of
    ingest's); the invalid span when `parent` is not sampled."""
    if not _sampled(parent):
        return trace.INVALID_SPAN
    attrs = {f"stepwise.{k}": v for k, v in attributes.items() if v is not None}
    job = getattr(parent, "attributes", {}).get(JOB_ID)
    if job is not None:
        attrs[JOB_ID] = job
    context = trace.set_span_in_context(parent)
    return tracer().start_span(name, context=context, start_time=start_ns, attributes=attrs)


@contextmanager
def child(parent: Span, name: str, **attributes: object) -> Iterator[Span]:
    """`start_child` as a block: the span ends with it, in error if the block raised."""
    span = start_child(parent, name, **attributes)
    try:
        yield span
    except BaseException as e:
        end(span, error=f"{type(e).__name__}: {e}")
        raise
    end(span)


def kafka_headers_of(span: Span) -> list[tuple[str, bytes]]:
    """`span`'s context as Kafka record headers (none when it is not sampled)."""
    return [(k, v.encode()) for k, v in headers_of(span).items()]


def headers_of(span: Span) -> dict[str, str]:
    """`span`'s context as plain headers (a Celery task's), naming this instance as the
    caller in `tracestate`. A span that has ended still hands its context on (a check joins
    the step it judges after the step's span is closed), and so does an unsampled one: the
    stages after it follow that decision instead of drawing their own."""
    if not span.get_span_context().is_valid:
        return {}
    return propagate.to_headers(trace.set_span_in_context(span), caller=setup.instance())


def end(
    span: Span, error: str | None = None, end_ns: int | None = None, **attributes: object
) -> None:
    """End `span`, with its outcome: an error puts the span in error with its message. A span
    called from another instance is recorded as that call's edge too."""
    if not span.is_recording():
        return
    for k, v in attributes.items():
        if v is not None:
            span.set_attribute(f"stepwise.{k}", v)
    if error:
        span.set_status(Status(StatusCode.ERROR, error))
    end_ns = end_ns if end_ns is not None else time.time_ns()
    span.end(end_time=end_ns)
    attrs = getattr(span, "attributes", None) or {}
    caller = attrs.get(CALLER)
    start_ns = getattr(span, "start_time", None)
    if caller and start_ns is not None:
        telemetry.observe_call(
            str(caller), setup.instance(), max(0, end_ns - start_ns) / 1e9,
            error=bool(error), retries=int(attrs.get(RETRIES, 0) or 0),
        )  # fmt: skip


def _sampled(span: Span) -> bool:
    ctx = span.get_span_context()
    return ctx.is_valid and ctx.trace_flags.sampled


def now_ns() -> int:
    return time.time_ns()
