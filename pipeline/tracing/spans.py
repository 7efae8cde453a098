"""Span helpers the stages share: a job's span opened from the context a message carries, its
context handed on in headers, its end with the outcome. With tracing off every call is the
OpenTelemetry no-op (no span is recorded, no header is written)."""

from __future__ import annotations

import time

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from pipeline.tracing import propagate, setup
from pipeline.tracing.setup import tracer
from pipeline.tracing.store import JOB_ID


def start_job_span(
    name: str, job_id: str, headers=None, start_ns: int | None = None, **attributes: object
) -> Span:
    """A span of job `job_id`, child of the context in `headers` (Kafka or Celery headers).
    Tracing off: the invalid span at once (no header parsed, no attributes built), since every
    record of every stage comes through here."""
    if not setup.enabled():
        return trace.INVALID_SPAN
    parent = propagate.from_headers(headers)
    attrs = {JOB_ID: job_id, **{f"stepwise.{k}": v for k, v in attributes.items() if v is not None}}
    return tracer().start_span(name, context=parent, start_time=start_ns, attributes=attrs)


def kafka_headers_of(span: Span) -> list[tuple[str, bytes]]:
    """`span`'s context as Kafka record headers (none when it is not sampled)."""
    return propagate.kafka_headers(trace.set_span_in_context(span))


def headers_of(span: Span) -> dict[str, str]:
    """`span`'s context as plain headers (a Celery task's)."""
    return propagate.to_headers(trace.set_span_in_context(span))


def end(
    span: Span, error: str | None = None, end_ns: int | None = None, **attributes: object
) -> None:
    """End `span`, with its outcome: an error puts the span in error with its message."""
    if not span.is_recording():
        return
    for k, v in attributes.items():
        if v is not None:
            span.set_attribute(f"stepwise.{k}", v)
    if error:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=end_ns)


def now_ns() -> int:
    return time.time_ns()
