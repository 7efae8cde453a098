"""The process's own metrics and their `/metrics` server.

The module's `DEFAULT` is the process's `Metrics` (tests build their own with a fresh
registry); the module-level helpers (`observe_result`, `observe_step`, `set_kv_usage`, ...)
record into it, so a worker stays one call per figure.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from billiard.process import current_process  # Celery's pool (verify workers run in it)
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from pipeline.settings import build, declared, setting
from pipeline.telemetry.metrics import DISABLED, METRICS_PORT_ENV, Metrics

log = logging.getLogger(__name__)

# The process's registry: Stepwise's metrics plus process_* and python_* (CPU, memory, GC), as
# on the library's global registry, which we leave alone.
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)
DEFAULT = Metrics(REGISTRY)
# Every documented name (docs/telemetry.md), as a scrape shows it; a test holds it to the code.
METRIC_NAMES = (
    "stepwise_ttft_seconds",
    "stepwise_e2e_latency_seconds",
    "stepwise_stage_latency_seconds",
    "stepwise_step_tokens",
    "stepwise_job_steps",
    "stepwise_step_verdicts_total",
    "stepwise_claims_total",
    "stepwise_job_verification_total",
    "stepwise_job_checkable_ratio",
    "stepwise_backtracks_total",
    "stepwise_wasted_tokens_total",
    "stepwise_probe_tokens_total",
    "stepwise_prompt_tokens_total",
    "stepwise_completion_tokens_total",
    "stepwise_jobs_total",
    "stepwise_engine_generated_tokens_total",
    "stepwise_engine_forwards_total",
    "stepwise_spec_decode_num_drafts_total",
    "stepwise_spec_decode_num_draft_tokens_total",
    "stepwise_spec_decode_num_accepted_tokens_total",
    "stepwise_spec_decode_acceptance_ratio",
    "stepwise_engine_tokens_per_forward",
    "stepwise_consumer_lag_messages",
    "stepwise_kv_cache_usage_ratio",
    "stepwise_kv_cache_used_blocks",
    "stepwise_kv_cache_capacity_blocks",
    "stepwise_inflight_sequences",
    "stepwise_cache_hits_total",
    "stepwise_cache_misses_total",
    "stepwise_budget_max_thinking_tokens",
    "stepwise_budget_max_steps",
    "stepwise_budget_probe_effort",
    "stepwise_budget_version",
    "stepwise_budget_resample_cap",
    "stepwise_budget_early_exit",
    "stepwise_budget_shed_ratio",
    "stepwise_budget_pressure",
    "stepwise_budget_predicted_latency_ratio",
    "stepwise_budget_slo_seconds",
    "stepwise_budget_deadline_cuts_total",
    "stepwise_jobs_shed_total",
    "stepwise_decode_pace_tokens_per_second",
    "stepwise_decode_batch_occupancy_ratio",
    "stepwise_verify_checks_total",
    "stepwise_verify_check_duration_seconds",
    "stepwise_kv_imports_total",
    "stepwise_kv_import_seconds",
    "stepwise_trace_call_seconds",
    "stepwise_trace_call_errors_total",
    "stepwise_trace_call_retries_total",
    "stepwise_worker_info",
)

observe_result = DEFAULT.observe_result
observe_step = DEFAULT.observe_step
observe_stage = DEFAULT.observe_stage
add_generated_tokens = DEFAULT.add_generated_tokens
add_forwards = DEFAULT.add_forwards
set_lag = DEFAULT.set_lag
set_kv_usage = DEFAULT.set_kv_usage
set_inflight = DEFAULT.set_inflight
cache_hit = DEFAULT.cache_hit
cache_miss = DEFAULT.cache_miss
set_budget = DEFAULT.set_budget
set_controller = DEFAULT.set_controller
job_shed = DEFAULT.job_shed
add_deadline_cuts = DEFAULT.add_deadline_cuts
set_decode_pace = DEFAULT.set_decode_pace
verify_check = DEFAULT.verify_check
observe_call = DEFAULT.observe_call
observe_kv_import = DEFAULT.observe_kv_import
set_worker_info = DEFAULT.set_worker_info

# -- serving -----------------------------------------------------------------------------------

_servers: list = []  # (WSGIServer, Thread) of every server this process started


def start_metrics_server(
    port: int, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> int:
    """Serve `/metrics` (any path, in fact) on a daemon thread; the bound port (0: a free one)."""
    server, thread = start_http_server(
        port, addr=addr, registry=REGISTRY if registry is None else registry
    )
    _servers.append((server, thread))
    return server.server_address[1]


def stop_metrics_servers() -> None:
    """Close every server start_metrics_server opened (tests; workers just exit)."""
    servers, _servers[:] = list(_servers), []
    # shutdown() waits for the serving loop's next poll (0.5 s): ask them all at once.
    stoppers = [threading.Thread(target=server.shutdown) for server, _ in servers]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join(timeout=5)
    for server, thread in servers:
        server.server_close()
        thread.join(timeout=5)


@declared
@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """Where a process serves /metrics."""

    port: int = setting(
        0,
        env="METRICS_PORT",
        concern="metrics",
        help="/metrics: 0 a free port, N: N + the process's offset, -1 off",
    )
    # Loopback unless told: /metrics has no authentication and its labels name tenants' work.
    addr: str = setting(
        "127.0.0.1",
        env="METRICS_ADDR",
        concern="metrics",
        help="address /metrics binds (0.0.0.0: all)",
    )


def metrics_port(offset: int = 0) -> int:
    """STEPWISE_METRICS_PORT: unset or 0 -> 0 (a free port), N > 0 -> N + offset, -1 -> DISABLED."""
    base = build(MetricsConfig).port
    if base < DISABLED:
        raise ValueError(f"{METRICS_PORT_ENV} must be -1, 0 or a port, got {base}")
    return base if base <= 0 else base + offset


def serve_metrics(stage: str, model: str = "", offset: int = 0) -> int:
    """A worker's one call at start-up: label this process, serve `/metrics` as the env says,
    log where. Returns the port, or DISABLED."""
    set_worker_info(stage, model)
    port = metrics_port(offset)
    if port == DISABLED:
        log.info("%s: metrics disabled (%s=-1)", stage, METRICS_PORT_ENV)
        return DISABLED
    bound = start_metrics_server(port, build(MetricsConfig).addr)
    log.info("%s: serving /metrics on port %d", stage, bound)
    return bound


def serve_pool_child_metrics(**_: object) -> None:
    """Celery `worker_process_init` handler: each prefork child serves its own `/metrics` on
    base port + its pool index (stable across child restarts), since tasks run in the child."""
    serve_metrics("verify", offset=getattr(current_process(), "index", 0) or 0)
