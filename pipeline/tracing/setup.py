"""The process's tracer, built once from the settings.

Sampling 0 (the default) builds nothing: `tracer()` is OpenTelemetry's no-op, so tracing off
costs a function call per span site. Otherwise a TracerProvider with a parent-based ratio
sampler (a job sampled at the gateway or ingest stays sampled in every stage, since the
decision travels in `traceparent`), its spans batched to the local store and, when an endpoint
is set (`STEPWISE_OTLP_ENDPOINT`, or the standard `OTEL_EXPORTER_OTLP_*` variables), to an
OTLP/HTTP collector.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from pipeline.settings import build, declared, setting
from pipeline.tracing.store import FileSpanExporter

TRACER_NAME = "stepwise"
_provider: TracerProvider | None = None
_tracer: trace.Tracer | None = None  # the provider's, made once: get_tracer costs ~40 us a call
_instance = ""  # this process as a node of the anomaly-path graph: <stage>@<host>:<pid>
_NOOP = trace.NoOpTracer()


def init_tracing(
    service: str, sample: float, trace_dir: str, otlp_endpoint: str = ""
) -> TracerProvider | None:
    """Build and install this process's provider; None (and nothing installed) at sample 0."""
    global _provider, _tracer, _instance
    if _provider is not None:  # one per process (an in-process stack's workers share it)
        return _provider
    if not 0.0 <= sample <= 1.0:
        raise ValueError(f"STEPWISE_TRACE_SAMPLE must lie in [0, 1], got {sample}")
    if sample == 0.0:
        return None
    resource = Resource.create(
        {"service.name": f"stepwise-{service}", "host.name": socket.gethostname(),
         "process.pid": os.getpid()}
    )  # fmt: skip
    provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(sample)))
    # A short delay: a span is in the store within ~0.2 s (`stepwise trace` right after a job).
    provider.add_span_processor(
        BatchSpanProcessor(FileSpanExporter(trace_dir), schedule_delay_millis=200)
    )
    endpoint = (
        otlp_endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    )
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        if not endpoint.rstrip("/").endswith("/v1/traces"):
            endpoint = endpoint.rstrip("/") + "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    _provider = provider
    _tracer = provider.get_tracer(TRACER_NAME)
    _instance = instance_name(service, socket.gethostname(), os.getpid())
    return provider


@declared
@dataclass(frozen=True, slots=True)
class TracingConfig:
    """Whether and where a process traces (docs/tracing.md)."""

    sample: float = setting(
        0.0,
        env="TRACE_SAMPLE",
        concern="tracing",
        help="fraction of jobs traced: 0 off (no tracer is built), 1 every job",
    )
    otlp_endpoint: str = setting(
        "",
        env="OTLP_ENDPOINT",
        concern="tracing",
        help="OTLP/HTTP collector for spans (http://host:4318); empty: OTEL_EXPORTER_OTLP_* "
        "or none",
    )
    trace_dir: str = setting(
        "~/.cache/stepwise/traces",
        env="TRACE_DIR",
        concern="tracing",
        help="the local span store (JSON lines)",
    )


def init_from_settings(service: str) -> TracerProvider | None:
    """`init_tracing` with the installed settings' values."""
    c = build(TracingConfig)
    return init_tracing(service, c.sample, c.trace_dir, c.otlp_endpoint)


def instance_name(service: str, host: str, pid: int) -> str:
    """A node of the anomaly-path graph (paths.node_of reads a span's the same way)."""
    return f"{service}@{host}:{pid}"


def instance() -> str:
    """This process's node name ("" when tracing is off)."""
    return _instance


def enabled() -> bool:
    return _provider is not None


def tracer() -> trace.Tracer:
    """This process's tracer: the provider's, or the no-op one when tracing is off."""
    return _NOOP if _tracer is None else _tracer


def flush(timeout_ms: int = 5000) -> None:
    """Write out every finished span (a worker's shutdown; a test before it reads the store)."""
    if _provider is not None:
        _provider.force_flush(timeout_ms)


def shutdown() -> None:
    global _provider, _tracer, _instance
    if _provider is not None:
        _provider.shutdown()
        _provider = _tracer = None
        _instance = ""
