"""The Celery app of the step checks, as decode (the sender) sees it: Redis broker, the task's
name and queue, `send`. The worker's side (the task body, the Celery worker) is
pipeline/verify/worker.py.

Decode workers send `stepwise.verify_step` with a VerifyRequest (JSON) and read verdicts from
their own stream (`reply_stream`). The task is:
* idempotent: the verdict is a pure function of the request, and decode ignores a second
  verdict for an attempt that has one, so a redelivered task is harmless;
* `acks_late` + `reject_on_worker_lost`: a task whose worker dies is redelivered (after the
  broker's visibility timeout), not lost; decode never waits for that — its verdict timeout
  counts the step as `unknown` and goes on;
* bounded: Z3's own timeout inside every check, plus Celery soft and hard time limits.
"""

from __future__ import annotations

import os
import socket

from celery import Celery

from pipeline import schema

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
    """The Celery app on this Redis (a sender's: the worker registers the task body on it,
    pipeline/verify/worker.py; verdicts go back on the same Redis, to each reply stream)."""
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
    return app


def worker_name() -> str:
    return f"verify-{socket.gethostname()}-{os.getpid()}"


def send(
    request: schema.VerifyRequest, target: Celery, headers: dict[str, str] | None = None
) -> None:
    """Queue a check (blocking I/O on the broker: call it off the event loop); `headers`: the
    trace context (W3C traceparent) the check's span joins."""
    target.send_task(
        TASK_NAME, args=[schema.encode_json(request).decode()], queue=QUEUE, headers=headers
    )
