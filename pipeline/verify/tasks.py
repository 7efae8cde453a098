"""The Celery app and the step-check task: Redis broker, verdicts on the asker's Redis stream.

Decode workers send `stepwise.verify_step` with a VerifyRequest (JSON) and read verdicts from
their own stream (`reply_stream`). The task is:
* idempotent: the verdict is a pure function of the request, and decode ignores a second
  verdict for an attempt that has one, so a redelivered task is harmless;
* `acks_late` + `reject_on_worker_lost`: a task whose worker dies is redelivered (after the
  broker's visibility timeout), not lost; decode never waits for that — its verdict timeout
  counts the step as `unknown` and goes on;
* bounded: Z3's own timeout inside every check, plus Celery soft and hard time limits.

`stepwise worker verify` builds the app from the process's settings (STEPWISE_REDIS) and runs
`celery worker` on it (prefork pool: time limits need it), starting it again if it exits on an
error (`run_worker`: a Redis restart can end it); nothing is built at import.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time

import redis
from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from pipeline import schema, telemetry
from pipeline.settings import Settings
from pipeline.tracing import propagate, spans
from pipeline.tracing import setup as tracing_setup

log = logging.getLogger(__name__)

TASK_NAME = "stepwise.verify_step"
QUEUE = "stepwise.verify"
SOFT_TIME_LIMIT_S = 5.0
HARD_TIME_LIMIT_S = 10.0
CHECK_TIMEOUT_MS = 200  # Z3's own limit per check
STREAM_MAXLEN = 100_000  # verdicts kept per reply stream (approximate trim)
# A reserved task of a dead worker returns to the queue after this long (Redis transport).
VISIBILITY_TIMEOUT_S = 60


DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def make_app(broker_url: str) -> Celery:
    """The Celery app on this Redis, with the step-check task registered (verdicts go back on
    the same Redis, to each request's reply stream)."""
    app = Celery("stepwise", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_default_queue=QUEUE,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,  # verdicts travel on Redis streams, not the result backend
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=8,  # checks take ~1 ms: keep the pool fed
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
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


def _worker_name() -> str:
    return f"verify-{socket.gethostname()}-{os.getpid()}"


def run_check(req: schema.VerifyRequest) -> schema.VerdictMessage:
    """The check itself (no Celery, no Redis): what the task computes."""
    from pipeline.verify.checker import check_step

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
        worker=_worker_name(),
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


def send(
    request: schema.VerifyRequest, target: Celery, headers: dict[str, str] | None = None
) -> None:
    """Queue a check (blocking I/O on the broker: call it off the event loop); `headers`: the
    trace context (W3C traceparent) the check's span joins."""
    target.send_task(
        TASK_NAME, args=[schema.encode_json(request).decode()], queue=QUEUE, headers=headers
    )


def _injected_delay() -> None:
    """STEPWISE_VERIFY_TEST_DELAY_MS: pool child 0 is made slow (the anomaly-path test)."""
    from pipeline import settings

    delay_ms = settings.current()["VERIFY_TEST_DELAY_MS"]
    if delay_ms > 0:
        from billiard.process import current_process

        if (getattr(current_process(), "index", 0) or 0) == 0:
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
        f"--hostname={_worker_name()}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def main(current: Settings) -> int:
    """`stepwise worker verify`: a Celery worker on the settings' Redis."""
    from celery.signals import worker_process_init

    app = make_app(current["REDIS"] or DEFAULT_REDIS)
    n = current["VERIFY_CONCURRENCY"]
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
    verify pool then stayed down after a Redis restart (pipeline/local/faults.py). A warm
    shutdown (SIGTERM) exits 0 and ends this; `restarts` bounds the restarts (None: no bound)."""
    from celery.signals import worker_shutdown

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
