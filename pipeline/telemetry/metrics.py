"""Prometheus metrics every stage shares: one `Metrics` object holds them all on one registry.

Labels are small, closed sets (stage, slo_class, status, verdict, ...): a value outside its set
raises ValueError, and no job id, tenant or user ever becomes a label. The metric reference is
docs/telemetry.md.
"""

from __future__ import annotations

import logging
import typing
from collections import defaultdict
from collections.abc import Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
)

from pipeline import schema

log = logging.getLogger(__name__)

# -- label sets (closed: anything else is a bug, not a new series) ----------------------------

SLO_CLASSES: tuple[str, ...] = typing.get_args(schema.SloClass)
VERDICTS: tuple[str, ...] = typing.get_args(schema.Verdict)
CLAIM_VERDICTS = ("entailed", "contradicted", "consistent", "unknown", "unreadable", "ungrounded")
COVERAGE_STATUSES: tuple[str, ...] = typing.get_args(
    typing.get_type_hints(schema.VerificationReport)["status"]
)
STATUSES: tuple[str, ...] = typing.get_args(typing.get_type_hints(schema.Result)["status"])
STOP_REASONS: tuple[str, ...] = typing.get_args(
    typing.get_type_hints(schema.BudgetReport)["stop_reason"]
)
WORKER_STAGES = ("ingest", "prefill", "decode", "verify", "budget", "gateway")  # who exports
LATENCY_STAGES = ("queue", "ingest", "prefill", "decode", "verify")  # what took the time
CACHE_LEVELS = ("answer", "step", "prefix")
KV_TRANSPORTS = ("shm_pool", "shm", "cuda_ipc", "mooncake", "none")  # as a handoff's KV came
KV_OUTCOMES = ("imported", "reprefill")
CACHE_LAYERS = ("l1", "l2")  # l1: in-process LRU, l2: Redis
# source / target: instances (`stage@host:pid`) of the traced call graph; bounded by the
# deployment's processes, never by its jobs (docs/tracing.md).
ALLOWED_LABELS = frozenset(
    {"stage", "slo_class", "status", "stop_reason", "verdict", "level", "layer", "model",
     "source", "target", "transport", "outcome"}
)  # fmt: skip

# -- buckets ---------------------------------------------------------------------------------

LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75,
    1.0, 1.5, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
)  # fmt: skip
CHECK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2.5, 5, 10)
STEP_TOKEN_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
JOB_STEP_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)

METRICS_PORT_ENV = "STEPWISE_METRICS_PORT"
METRICS_ADDR_ENV = "STEPWISE_METRICS_ADDR"
DISABLED = -1  # STEPWISE_METRICS_PORT=-1: serve nothing
OTHER = "other"  # a value read from a Result that is outside its label set


def _check(value: str, allowed: Iterable[str], label: str) -> str:
    if value not in allowed:
        raise ValueError(f"{label}={value!r} is not one of {tuple(allowed)}")
    return value


def _or_other(value: str, allowed: Iterable[str]) -> str:
    """A label value read from a message: one outside its set becomes `other`, never a series
    of its own, and never an exception on a worker's publish path."""
    return value if value in allowed else OTHER


class Metrics:
    """Every Stepwise metric, registered on one CollectorRegistry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()
        slo, stage = ("slo_class",), ("stage",)
        # Latency (seconds) -------------------------------------------------------------------
        self.ttft = Histogram(
            "stepwise_ttft_seconds", "Time from job creation to its first token.",
            slo, buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.e2e = Histogram(
            "stepwise_e2e_latency_seconds", "Time from job creation to its Result.",
            slo, buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.stage_latency = Histogram(
            "stepwise_stage_latency_seconds", "Time a job spent in one stage (queue: admission).",
            stage, buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        # Reasoning shape and work ------------------------------------------------------------
        self.step_tokens = Histogram(
            "stepwise_step_tokens", "Tokens in one reasoning step.",
            buckets=STEP_TOKEN_BUCKETS, registry=r,
        )  # fmt: skip
        self.job_steps = Histogram(
            "stepwise_job_steps", "Accepted reasoning steps per finished job.",
            slo, buckets=JOB_STEP_BUCKETS, registry=r,
        )  # fmt: skip
        self.verdicts = Counter(
            "stepwise_step_verdicts_total", "Steps of finished jobs, by verdict.",
            ("verdict",), registry=r,
        )  # fmt: skip
        self.claims = Counter(
            "stepwise_claims_total", "Claims the verifier read in finished jobs' checks, by "
            "verdict (unreadable: a piece it could not read).", ("verdict",), registry=r,
        )  # fmt: skip
        self.coverage = Counter(
            "stepwise_job_verification_total", "Finished jobs by what verification covered "
            "(verified, partial, nothing_checkable, off).", ("status",), registry=r,
        )  # fmt: skip
        self.checkable_share = Histogram(
            "stepwise_job_checkable_ratio", "Share of a job's steps with a claim that was read.",
            buckets=(0.0, 0.25, 0.5, 0.75, 0.99, 1.0), registry=r,
        )  # fmt: skip
        self.backtracks = Counter(
            "stepwise_backtracks_total", "Rollbacks after a contradicted step.", slo, registry=r
        )
        self.wasted_tokens = Counter(
            "stepwise_wasted_tokens_total", "Tokens discarded by backtracks.", slo, registry=r
        )
        self.probe_tokens = Counter(
            "stepwise_probe_tokens_total", "Tokens spent on early-exit answer probes.",
            slo, registry=r,
        )  # fmt: skip
        self.prompt_tokens = Counter(
            "stepwise_prompt_tokens_total", "Prompt tokens of finished jobs.", slo, registry=r
        )
        self.completion_tokens = Counter(
            "stepwise_completion_tokens_total", "Completion tokens of finished jobs.",
            slo, registry=r,
        )  # fmt: skip
        self.jobs = Counter(
            "stepwise_jobs_total", "Results published, by the stage that published them.",
            ("stage", "status", "stop_reason", "slo_class"), registry=r,
        )  # fmt: skip
        self.generated_tokens = Counter(
            "stepwise_engine_generated_tokens_total",
            "Tokens the engine sampled (kept, discarded and probes alike).",
            stage, registry=r,
        )  # fmt: skip
        self.forwards = Counter(
            "stepwise_engine_forwards_total",
            "Model forward passes the engine ran (generated tokens over these: tokens per "
            "forward, over the batch; above the batch's size with speculative decoding).",
            stage, registry=r,
        )  # fmt: skip
        # Speculative decoding, by vLLM's names (vllm:spec_decode_*).
        self.spec_drafts = Counter(
            "stepwise_spec_decode_num_drafts_total", "Proposals verified (one per job per pass).",
            stage, registry=r,
        )  # fmt: skip
        self.spec_draft_tokens = Counter(
            "stepwise_spec_decode_num_draft_tokens_total", "Tokens proposed.", stage, registry=r
        )
        self.spec_accepted_tokens = Counter(
            "stepwise_spec_decode_num_accepted_tokens_total",
            "Proposed tokens accepted (equal to what decoding without speculation samples).",
            stage, registry=r,
        )  # fmt: skip
        self.spec_acceptance = Gauge(
            "stepwise_spec_decode_acceptance_ratio",
            "Accepted over proposed tokens since the worker started (a window: rate() of the "
            "two counters).",
            stage, registry=r,
        )  # fmt: skip
        self.tokens_per_forward = Gauge(
            "stepwise_engine_tokens_per_forward",
            "Generated tokens over forward passes since the worker started.",
            stage, registry=r,
        )  # fmt: skip
        # Load --------------------------------------------------------------------------------
        self.lag = Gauge(
            "stepwise_consumer_lag_messages", "Records behind the end of the stage's input topic.",
            stage, registry=r,
        )  # fmt: skip
        self.kv_usage = Gauge(
            "stepwise_kv_cache_usage_ratio", "Fraction of KV pool blocks in use (0-1).",
            stage, registry=r,
        )  # fmt: skip
        self.kv_used = Gauge(
            "stepwise_kv_cache_used_blocks", "KV pool blocks in use.", stage, registry=r
        )
        self.kv_capacity = Gauge(
            "stepwise_kv_cache_capacity_blocks", "KV pool blocks in all.", stage, registry=r
        )
        self.inflight = Gauge(
            "stepwise_inflight_sequences", "Sequences running in the engine.", stage, registry=r
        )
        # Cache -------------------------------------------------------------------------------
        self.cache_hits = Counter(
            "stepwise_cache_hits_total", "Cache lookups answered, by level and layer.",
            ("level", "layer"), registry=r,
        )  # fmt: skip
        self.cache_misses = Counter(
            "stepwise_cache_misses_total", "Cache lookups that found nothing at any layer.",
            ("level",), registry=r,
        )  # fmt: skip
        # Budgets: every actuator of the controller and its reading (docs/budget.md) --------

        def per_class(name: str, doc: str) -> Gauge:
            return Gauge(f"stepwise_budget_{name}", doc, slo, registry=r)

        self.budget_thinking = per_class("max_thinking_tokens", "Current thinking-token limit.")
        self.budget_steps = per_class("max_steps", "Current step limit.")
        self.budget_probe = per_class("probe_effort", "Current early-exit probe effort.")
        self.budget_version = per_class("version", "Version of the limits in force.")
        self.budget_resample_cap = per_class(
            "resample_cap", "Backtracks per job before resampling stops (-1: none; 0: off)."
        )
        self.budget_early_exit = per_class("early_exit", "1 while the controller probes.")
        self.budget_shed = per_class("shed_ratio", "Share of new jobs refused as overloaded.")
        self.budget_pressure = per_class("pressure", "The law's pressure (0-5, a rung a unit).")
        self.budget_predicted = per_class(
            "predicted_latency_ratio", "Predicted latency over the SLO, the law's input."
        )
        self.budget_slo = per_class("slo_seconds", "The class's latency SLO.")
        self.shed_jobs = Counter(
            "stepwise_jobs_shed_total", "Jobs refused as overloaded (error Result, HTTP 429).",
            ("slo_class", "stage"), registry=r,
        )  # fmt: skip
        self.deadline_cuts = Counter(
            "stepwise_budget_deadline_cuts_total", "Running jobs whose deadline cut their "
            "thinking.", slo, registry=r,
        )  # fmt: skip
        pace = "stepwise_decode_pace_tokens_per_second", "Tokens/s one running sequence gets."
        self.decode_pace = Gauge(*pace, stage, registry=r)
        full = "stepwise_decode_batch_occupancy_ratio", "Running jobs over the batch capacity."
        self.decode_occupancy = Gauge(*full, stage, registry=r)
        # Verify (Celery) ---------------------------------------------------------------------
        self.checks = Counter(
            "stepwise_verify_checks_total", "Step checks run, by verdict.", ("verdict",), registry=r
        )
        self.check_duration = Histogram(
            "stepwise_verify_check_duration_seconds", "Time one step check took.",
            buckets=CHECK_BUCKETS, registry=r,
        )  # fmt: skip
        # KV handoffs on decode's side: imported, or prefilled again
        self.kv_imports = Counter(
            "stepwise_kv_imports", "Handoffs decode took, by transport and outcome.",
            ("transport", "outcome"), registry=r,
        )  # fmt: skip
        self.kv_import_time = Histogram(
            "stepwise_kv_import_seconds", "Time a KV import took (or failed in).",
            ("transport",), buckets=CHECK_BUCKETS, registry=r,
        )  # fmt: skip
        # Traced calls between instances (tracing on only): the anomaly-path graph's edges.
        edge = ("source", "target")
        self.calls = Histogram(
            "stepwise_trace_call_seconds", "A traced call from one instance to another.",
            edge, buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.call_errors = Counter(
            "stepwise_trace_call_errors", "Traced calls that ended in error.", edge, registry=r
        )
        self.call_retries = Counter(
            "stepwise_trace_call_retries", "Retries of traced calls.", edge, registry=r
        )
        # Counts since the process started, per (stage, name), for the ratio gauges.
        self._totals: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.info = Info("stepwise_worker", "The stage and model this process serves.", registry=r)
        # Series with a closed label set start at 0, so rate() works before the first event.
        for verdict in VERDICTS:
            self.verdicts.labels(verdict)
            self.checks.labels(verdict)
        for name in CLAIM_VERDICTS:
            self.claims.labels(name)
        for status in COVERAGE_STATUSES:
            self.coverage.labels(status)
        for transport in KV_TRANSPORTS:
            for outcome in KV_OUTCOMES:
                self.kv_imports.labels(transport, outcome)
        for level in CACHE_LEVELS:
            self.cache_misses.labels(level)
            for layer in CACHE_LAYERS:
                self.cache_hits.labels(level, layer)

    # -- per job -------------------------------------------------------------------------------

    def observe_result(self, result: schema.Result, stage: str = "decode") -> None:
        """Record one published Result: its status, timings, and (unless cached) its work."""
        _check(stage, WORKER_STAGES, "stage")
        slo = _or_other(result.slo_class, SLO_CLASSES)
        status = _or_other(result.status, STATUSES)
        stop = _or_other(result.budget.stop_reason, STOP_REASONS)
        self.jobs.labels(stage, status, stop, slo).inc()
        t = result.timings
        if t.ttft_ms is not None:
            self.ttft.labels(slo).observe(t.ttft_ms / 1000)
        if t.e2e_ms is not None:
            self.e2e.labels(slo).observe(t.e2e_ms / 1000)
        if t.queue_ms is not None:
            self.stage_latency.labels("queue").observe(t.queue_ms / 1000)
        for name, ms in t.stages.items():
            if name in LATENCY_STAGES:  # a stage name from the wire: unknown ones are skipped
                self.stage_latency.labels(name).observe(ms / 1000)
        if result.status == "cached":
            return  # the work was done (and counted) by the run that filled the cache
        u = result.usage
        self.backtracks.labels(slo).inc(u.backtracks)
        self.wasted_tokens.labels(slo).inc(u.wasted_tokens)
        self.probe_tokens.labels(slo).inc(u.probe_tokens)
        self.prompt_tokens.labels(slo).inc(u.prompt_tokens)
        self.completion_tokens.labels(slo).inc(u.completion_tokens)
        if result.status == "ok":
            self.job_steps.labels(slo).observe(u.steps)
        for step in result.steps:
            self.verdicts.labels(_or_other(step.verdict, VERDICTS)).inc()
        if (v := result.verification) is not None:
            for name in CLAIM_VERDICTS:
                self.claims.labels(name).inc(getattr(v, name))
            self.coverage.labels(v.status).inc()
            if v.status != "off":
                self.checkable_share.observe(v.checkable_share)

    def observe_step(self, num_tokens: int) -> None:
        self.step_tokens.observe(num_tokens)

    def observe_stage(self, stage: str, seconds: float) -> None:
        self.stage_latency.labels(_check(stage, LATENCY_STAGES, "stage")).observe(seconds)

    def add_generated_tokens(self, num_tokens: int, stage: str = "decode") -> None:
        self.generated_tokens.labels(_check(stage, WORKER_STAGES, "stage")).inc(num_tokens)
        self._totals[stage, "generated"] += num_tokens

    def add_forwards(
        self,
        forwards: int,
        drafts: int = 0,
        draft_tokens: int = 0,
        accepted_tokens: int = 0,
        stage: str = "decode",
    ) -> None:
        """The engine's forward passes and speculative decoding's counts since the last call;
        the two ratio gauges follow the counters' totals."""
        _check(stage, WORKER_STAGES, "stage")
        self.forwards.labels(stage).inc(forwards)
        self.spec_drafts.labels(stage).inc(drafts)
        self.spec_draft_tokens.labels(stage).inc(draft_tokens)
        self.spec_accepted_tokens.labels(stage).inc(accepted_tokens)
        t = self._totals
        t[stage, "forwards"] += forwards
        t[stage, "proposed"] += draft_tokens
        t[stage, "accepted"] += accepted_tokens
        if t[stage, "proposed"]:
            self.spec_acceptance.labels(stage).set(t[stage, "accepted"] / t[stage, "proposed"])
        if t[stage, "forwards"]:
            self.tokens_per_forward.labels(stage).set(t[stage, "generated"] / t[stage, "forwards"])

    # -- load ----------------------------------------------------------------------------------

    def set_lag(self, stage: str, lag: int) -> None:
        """Consumer lag of `stage`'s group on its input topic, summed over partitions."""
        self.lag.labels(_check(stage, WORKER_STAGES, "stage")).set(lag)

    def set_kv_usage(self, used_blocks: int, total_blocks: int, stage: str = "decode") -> None:
        _check(stage, WORKER_STAGES, "stage")
        self.kv_used.labels(stage).set(used_blocks)
        self.kv_capacity.labels(stage).set(total_blocks)
        self.kv_usage.labels(stage).set(used_blocks / total_blocks if total_blocks else 0.0)

    def set_inflight(self, num_seqs: int, stage: str = "decode") -> None:
        self.inflight.labels(_check(stage, WORKER_STAGES, "stage")).set(num_seqs)

    # -- cache, budgets, verify ----------------------------------------------------------------

    def cache_hit(self, level: str, layer: str = "l1") -> None:
        _check(level, CACHE_LEVELS, "level")
        self.cache_hits.labels(level, _check(layer, CACHE_LAYERS, "layer")).inc()

    def cache_miss(self, level: str) -> None:
        self.cache_misses.labels(_check(level, CACHE_LEVELS, "level")).inc()

    def set_budget(self, slo_class: str, limits: object) -> None:
        """Publish limits in force: any object with `max_thinking_tokens` and `max_steps`, and
        optionally `probe_effort` and `version` (schema.Budget, the controller's limits)."""
        _check(slo_class, SLO_CLASSES, "slo_class")
        for gauge, attr in (
            (self.budget_thinking, "max_thinking_tokens"),
            (self.budget_steps, "max_steps"),
            (self.budget_probe, "probe_effort"),
            (self.budget_version, "version"),
        ):
            value = getattr(limits, attr, None)
            if value is not None:
                gauge.labels(slo_class).set(value)

    def set_controller(self, slo_class: str, limits: object, predicted: float | None) -> None:
        """The other actuators (limits: budget.ClassLimits) and the law's reading."""
        _check(slo_class, SLO_CLASSES, "slo_class")
        cap = getattr(limits, "resample_cap", None)
        self.budget_resample_cap.labels(slo_class).set(-1 if cap is None else cap)
        self.budget_early_exit.labels(slo_class).set(float(getattr(limits, "early_exit", 0)))
        self.budget_shed.labels(slo_class).set(getattr(limits, "shed", 0.0))
        self.budget_pressure.labels(slo_class).set(getattr(limits, "pressure", 0.0))
        self.budget_slo.labels(slo_class).set(getattr(limits, "slo_ms", 0.0) / 1000.0)
        if predicted is not None:
            self.budget_predicted.labels(slo_class).set(predicted)

    def job_shed(self, slo_class: str, stage: str = "ingest") -> None:
        self.shed_jobs.labels(_check(slo_class, SLO_CLASSES, "slo_class"), stage).inc()

    def add_deadline_cuts(self, slo_class: str, num_jobs: int) -> None:
        self.deadline_cuts.labels(_check(slo_class, SLO_CLASSES, "slo_class")).inc(num_jobs)

    def set_decode_pace(self, tok_s: float | None, running: int, capacity: int) -> None:
        self.decode_pace.labels("decode").set(tok_s or 0.0)
        self.decode_occupancy.labels("decode").set(running / max(1, capacity))

    def verify_check(self, verdict: str, seconds: float) -> None:
        self.checks.labels(_check(verdict, VERDICTS, "verdict")).inc()
        self.check_duration.observe(seconds)

    def observe_kv_import(self, transport: str, outcome: str, seconds: float) -> None:
        """One handoff taken by decode: how its KV came (or that it was prefilled again)."""
        transport = _or_other(transport, KV_TRANSPORTS)
        self.kv_imports.labels(transport, _check(outcome, KV_OUTCOMES, "outcome")).inc()
        if transport != "none":
            self.kv_import_time.labels(transport).observe(seconds)

    def observe_call(
        self, source: str, target: str, seconds: float, error: bool = False, retries: int = 0
    ) -> None:
        """One traced call of `target` by `source` (instances): its latency and outcome. The
        error and retry series start at 0 with the edge, so their rates exist for it."""
        self.calls.labels(source, target).observe(seconds)
        self.call_errors.labels(source, target).inc(1 if error else 0)
        self.call_retries.labels(source, target).inc(retries)

    def set_worker_info(self, stage: str, model: str = "") -> None:
        self.info.info({"stage": _check(stage, WORKER_STAGES, "stage"), "model": model})


def metric_names(metrics: Metrics) -> tuple[str, ...]:
    """The exposed name of every Stepwise metric on `metrics`' registry (counters end `_total`,
    the info metric `_info`)."""
    names = []
    for family in metrics.registry.collect():
        suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
        if family.name.startswith("stepwise_"):
            names.append(family.name + suffix)
    return tuple(sorted(names))
