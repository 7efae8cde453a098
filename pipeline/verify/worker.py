"""`stepwise worker verify`: the step-check task's body and the Celery worker that runs it.

`main` builds the app from the process's settings (STEPWISE_REDIS), registers the task on it
and runs `celery worker` (prefork pool: time limits need it), starting it again if it exits on
an error (`run_worker`: a Redis restart can end it); nothing is built at import.
"""

from __future__ import annotations

import functools
import logging
import time

import redis
from billiard.process import current_process
from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_process_init, worker_shutdown

from pipeline import schema, telemetry
from pipeline.config import PipelineConfig
from pipeline.settings import Settings, build
from pipeline.tracing import propagate, spans
from pipeline.tracing import setup as tracing_setup
from pipeline.verify.checker import check_step
from pipeline.verify.config import VerifyConfig
from pipeline.verify.tasks import (
    CHECK_TIMEOUT_MS,
    DEFAULT_REDIS,
    HARD_TIME_LIMIT_S,
    QUEUE,
    SOFT_TIME_LIMIT_S,
    STREAM_MAXLEN,
    TASK_NAME,
    make_app,
    worker_name,
)

log = logging.getLogger(__name__)


def register(app: Celery) -> Celery:
    """The step-check task on `app` (the worker's side of it)."""
    app.task(
        name=TASK_NAME,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        soft_time_limit=SOFT_TIME_LIMIT_S,
        time_limit=HARD_TIME_LIMIT_S,
        ignore_result=True,
    )(verify_step)
    return app


@functools.cache
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def run_check(req: schema.VerifyRequest) -> schema.VerdictMessage:
    """The check itself (no Celery, no Redis): what the task computes."""
    t0 = time.perf_counter()
    try:
        v = check_step(
            req.problem, req.premises, req.accepted, req.text, timeout_ms=CHECK_TIMEOUT_MS
        )
        verdict, reason, detail = v.verdict, v.reason, v.detail
        claims = schema.claim_infos(v.claims)
    except SoftTimeLimitExceeded:
        verdict, reason, detail, claims = "unknown", "timeout", "task time limit", []
    return schema.VerdictMessage(
        id=req.id,
        key=req.key,
        step=req.step,
        verdict=verdict,  # type: ignore[arg-type]
        reason=reason,
        detail=detail,
        claims=claims,
        check_ms=(time.perf_counter() - t0) * 1000,
        worker=worker_name(),
    )


def verify_step(task, payload: str) -> None:
    """The task body (`task`: the bound Celery task, whose app names the Redis)."""
    try:
        req = schema.decode(payload.encode(), schema.VerifyRequest, fmt="json")
    except schema.SchemaError as e:  # nobody to answer: the asker's verdict timeout covers it
        log.error("dropping an undecodable verify request: %s", e)
        return
    request = getattr(task, "request", None)
    carried = {h: request.get(h) for h in propagate.TRACE_HEADERS} if request is not None else {}
    retries = getattr(request, "retries", 0) or 0
    span = spans.start_job_span(
        "verify", req.id, {k: v for k, v in carried.items() if v}, root=False
    )
    _injected_delay()
    verdict = run_check(req)
    spans.end(
        span, step=req.step, verdict=verdict.verdict, reason=verdict.reason or None,
        solver_ms=round(verdict.check_ms, 3), worker=verdict.worker, retries=retries or None,
    )  # fmt: skip
    telemetry.verify_check(verdict.verdict, verdict.check_ms / 1000)
    _redis(task.app.conf.broker_url).xadd(
        req.reply_stream, {"v": schema.encode(verdict)}, maxlen=STREAM_MAXLEN, approximate=True
    )


def _injected_delay() -> None:
    """STEPWISE_VERIFY_TEST_DELAY_MS: pool child 0 is made slow (the anomaly-path test)."""
    delay_ms = build(VerifyConfig).test_delay_ms
    if delay_ms > 0 and (getattr(current_process(), "index", 0) or 0) == 0:
        time.sleep(delay_ms / 1000)


def _init_child_tracing(**_: object) -> None:
    tracing_setup.init_from_settings("verify")


def worker_argv(concurrency: int = 1, loglevel: str = "INFO") -> list[str]:
    """`celery worker` arguments for one verify worker."""
    return [
        "worker",
        f"--loglevel={loglevel}",
        "--pool=prefork",
        f"--concurrency={concurrency}",
        f"--queues={QUEUE}",
        f"--hostname={worker_name()}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def main(current: Settings) -> int:
    """`stepwise worker verify`: a Celery worker on the settings' Redis."""
    app = register(make_app(build(PipelineConfig, current).redis or DEFAULT_REDIS))
    n = build(VerifyConfig, current).concurrency
    # Checks run in the pool's children: each serves its own /metrics.
    worker_process_init.connect(telemetry.serve_pool_child_metrics, weak=False)
    # Each prefork child traces for itself (a provider made before the fork has no exporter
    # thread in the child).
    worker_process_init.connect(_init_child_tracing, weak=False)
    return run_worker(app, worker_argv(n))


# A Celery worker that dies on an error it calls unrecoverable starts again after this long
# (doubling up to the cap while it keeps failing).
RESTART_DELAY_S = (0.5, 30.0)


def run_worker(app: Celery, argv: list[str], restarts: int | None = None) -> int:
    """Run the Celery worker until it stops cleanly; one that exits on an error starts again.

    Celery 5.7 / kombu 5.7 give up for good when Redis goes away while tasks are reserved:
    closing the lost connection restores the unacked tasks, that needs a new connection whose
    parameters are gone by then, and the AttributeError is an "Unrecoverable error". The whole
    verify pool then stayed down after a Redis restart (tools/faults.py). A warm
    shutdown (SIGTERM) exits 0 and ends this; `restarts` bounds the restarts (None: no bound)."""
    exits: list[int] = []

    def exit_code(sender: object, **_: object) -> None:  # app.start() returns no exit code
        exits.append(getattr(sender, "exitcode", 0) or 0)

    worker_shutdown.connect(exit_code, weak=False)
    first, cap = RESTART_DELAY_S
    delay, done = first, 0
    try:
        while True:
            started = time.monotonic()
            exits.clear()
            app.worker_main(argv)
            code = exits[-1] if exits else 0
            if not code or (restarts is not None and done >= restarts):
                return code or 0
            done += 1
            if time.monotonic() - started > 60:  # it ran well for a while: a new failure
                delay = first
            log.warning(
                "the Celery worker exited with %s; starting it again in %.1f s", code, delay
            )
            time.sleep(delay)
            delay = min(2 * delay, cap)
    finally:
        worker_shutdown.disconnect(exit_code)
