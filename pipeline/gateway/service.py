"""The gateway's core, shared by every endpoint: submit a Job for a tenant, find a tenant's job,
follow it. Owns the producer, the hub and its Kafka feed."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid

import msgspec
import redis.asyncio

from pipeline import schema, telemetry
from pipeline.budget import SLO_CLASSES, BudgetReader
from pipeline.budget.admission import check_admission
from pipeline.bus import BusConfig, Producer
from pipeline.errors import OverloadedError, StepwiseError
from pipeline.gateway.auth import ApiKeys, redis_keys_name, redis_lookup
from pipeline.gateway.config import GatewayConfig
from pipeline.gateway.feed import KafkaFeed
from pipeline.gateway.hub import Hub, JobLog, Subscription
from pipeline.gateway.limits import RateLimiter
from pipeline.stage.processes import RELEASE_TIMEOUT_S, release
from pipeline.topics import Topics
from pipeline.tracing import setup as tracing_setup
from pipeline.tracing import spans

# OpenAI's error `type` per HTTP status (its clients read `code`, `message`, `type`, `param`).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    409: "conflict_error",
    410: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
}


class GatewayError(StepwiseError):
    """A request the gateway refuses; `status` is the HTTP status (WebSocket: 4000 + status)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int,
        field: str | None = None,
        retry_after_s: float | None = None,
    ):
        super().__init__(message, code=code)
        self.status = status
        self.field = field
        self.retry_after_s = retry_after_s

    def body(self) -> dict:
        kind = ERROR_TYPES.get(self.status, "api_error")
        error = {"code": self.code, "message": str(self), "type": kind, "param": self.field}
        return {"error": {**error, "field": self.field}}

    def headers(self) -> dict[str, str] | None:
        if self.status == 401:
            return {"WWW-Authenticate": "Bearer"}
        if self.retry_after_s is not None:  # whole seconds, rounded up (RFC 9110)
            return {"Retry-After": str(max(1, math.ceil(self.retry_after_s)))}
        return None


def result_error(result: schema.Result) -> GatewayError:
    """The HTTP error for a job's error Result: 400 for a rejected job, 429 with Retry-After
    for one refused under load (`overloaded`), 500 for anything else."""
    err = result.error or schema.ErrorInfo(code="internal", message="job failed")
    status = 400 if result.status == "rejected" else 500
    if err.code == OverloadedError.code:
        status = 429
    return GatewayError(
        err.message, code=err.code, status=status, field=err.field,
        retry_after_s=err.retry_after_s if status == 429 else None,
    )  # fmt: skip


def not_found(job_id: str) -> GatewayError:
    return GatewayError(f"no job {job_id!r}", code="not_found", status=404)


def new_job_id() -> str:
    return f"gw-{uuid.uuid4().hex}"


def parse_job(body: bytes) -> schema.Job:
    """A Job from JSON; an absent `id` gets a generated one. SchemaError -> 400."""
    try:
        obj = msgspec.json.decode(body)
    except msgspec.DecodeError:
        obj = None
    if isinstance(obj, dict) and "id" not in obj:
        body = msgspec.json.encode({**obj, "id": new_job_id()})
    try:
        return schema.decode_job(body, "application/json")
    except schema.SchemaError as exc:
        raise GatewayError(str(exc), code=exc.code, status=400, field=exc.field) from None


class Gateway:
    def __init__(self, config: GatewayConfig):
        self.config = config
        self.topics = Topics(config.pipeline.topic_prefix)
        self.redis = None  # holds API keys when config.api_keys_redis
        lookup = None
        if config.api_keys_redis:
            self.redis = redis.asyncio.Redis.from_url(config.pipeline.redis, socket_timeout=2)
            lookup = redis_lookup(self.redis, redis_keys_name(config.pipeline.topic_prefix))
        self.keys = ApiKeys(config.api_keys, lookup, ttl_s=config.key_cache_ttl_s)
        self.rates = RateLimiter(config.tenant_limit, config.tenant_rates)
        self.bus = BusConfig(bootstrap_servers=config.pipeline.kafka, client_id="stepwise-gateway")
        self.hub = Hub(config.max_jobs, config.max_events_per_job)
        self.feed = KafkaFeed(self.bus, self.topics, self.hub)
        self.producer: Producer | None = None  # aiokafka wants the running loop: see start()
        # The budget controller's live limits, to refuse a shed job before it is published.
        self.budgets: BudgetReader | None = None
        self._budget_task: asyncio.Task | None = None

    async def start(self) -> None:
        if not self.config.pipeline.kafka:
            raise StepwiseError("the gateway needs STEPWISE_KAFKA", code="no_services")
        telemetry.set_worker_info("gateway", self.config.model_name)  # its /metrics says who
        tracing_setup.init_from_settings("gateway")
        self.producer = Producer(self.bus)
        await self.producer.start()
        await self.feed.start()
        if self.config.pipeline.redis:
            client = redis.asyncio.Redis.from_url(self.config.pipeline.redis, socket_timeout=2)
            self.budgets = BudgetReader(client, self.config.pipeline.topic_prefix)
            self._budget_task = asyncio.create_task(self._refresh_budgets())

    async def _refresh_budgets(self) -> None:
        assert self.budgets is not None
        while True:
            for slo_class in SLO_CLASSES:
                with contextlib.suppress(Exception):  # Redis away: keep the last limits
                    await self.budgets.get(slo_class)
            await asyncio.sleep(1.0)

    async def stop(self) -> None:
        """Each step bounded (pipeline/stage/processes.py, `release`): a consumer that never
        finished leaving its group held the whole shutdown once, and uvicorn with it."""
        # Independent of each other, so released side by side: one bound for all of them.
        steps = [release("gateway", "the feed", self.feed.stop())]
        if self._budget_task is not None:
            self._budget_task.cancel()
            # asyncio.wait neither cancels again nor waits past its timeout.
            await asyncio.wait({self._budget_task}, timeout=RELEASE_TIMEOUT_S)
            assert self.budgets is not None
            steps.append(release("gateway", "the budget reader", self.budgets.redis.aclose()))
        if self.producer is not None:
            steps.append(release("gateway", "the producer", self.producer.stop()))
        if self.redis is not None:
            steps.append(release("gateway", "redis", self.redis.aclose()))
        await asyncio.gather(*steps)

    def check_load(self, job: schema.Job) -> None:
        """429 with Retry-After, before the job is published, when the budget controller sheds
        the job's class and this job is among those refused (ingest decides the same way, by
        the job's id, for clients that publish to Kafka directly)."""
        if self.budgets is None:
            return
        cls = job.slo.class_
        try:
            check_admission(job.id, cls, self.budgets.cached(cls))
        except OverloadedError as e:
            telemetry.job_shed(cls, "gateway")
            raise GatewayError(
                str(e), code=e.code, status=429, retry_after_s=e.retry_after_s
            ) from None

    def inflight(self, tenant: str) -> int:
        return sum(
            1 for log in self.hub.logs.values() if log.tenant == tenant and log.result is None
        )

    async def submit(self, job: schema.Job, tenant: str) -> schema.Job:
        """Publish `job` as `tenant`'s (its tenant field is overwritten)."""
        log = self.hub.get(job.id)
        if log is not None and log.tenant not in (None, tenant):
            raise GatewayError(f"job id {job.id!r} is taken", code="id_conflict", status=409)
        limit = self.config.tenant_max_inflight
        if limit and (log is None or log.tenant is None) and self.inflight(tenant) >= limit:
            raise GatewayError(
                f"tenant {tenant!r} has {limit} jobs in flight", code="too_many_jobs", status=429
            )
        self.check_load(job)
        wait_s = self.rates.take(tenant)  # last: only a job that is going out takes a token
        if wait_s:
            rate = self.rates.limit_for(tenant)
            raise GatewayError(
                f"tenant {tenant!r} is over its rate limit ({rate.rate:g} jobs/s, burst "
                f"{rate.burst}); retry after {wait_s:.1f} s",
                code="rate_limited",
                status=429,
                retry_after_s=wait_s,
            )
        job = msgspec.structs.replace(
            job, tenant=tenant, created_ms=job.created_ms or int(time.time() * 1000)
        )
        self.hub.log_for(job.id).tenant = tenant  # before publishing: the events find an owner
        assert self.producer is not None, "Gateway.start() first"
        # The job's trace starts here (ingest continues it from the record's traceparent).
        span = spans.start_job_span("submit", job.id, tenant=tenant)
        try:
            await self.producer.send(
                self.topics.jobs, schema.encode(job), key=job.id,
                headers=spans.kafka_headers_of(span) or None,
            )  # fmt: skip
        except Exception as e:
            spans.end(span, error=f"{type(e).__name__}: {e}")
            raise
        spans.end(span, outcome="published")
        return job

    async def submit_and_follow(self, job: schema.Job, tenant: str) -> Subscription:
        """Submit `job` with a subscription taken first, so no event can be missed."""
        fresh = self.hub.get(job.id) is None
        sub = self.hub.subscribe(job.id, 0, self.config.ws_max_queue) if fresh else None
        try:
            job = await self.submit(job, tenant)
        except BaseException:
            if sub is not None:
                self.hub.unsubscribe(sub)
            raise
        return sub or self.subscribe(job.id, tenant)

    def find(self, job_id: str, tenant: str) -> JobLog:
        """The job's log, if `tenant` may see it; else 404 (never 403: ids do not leak)."""
        log = self.hub.get(job_id)
        if log is None or not self.keys.may_see(tenant, log.tenant):
            raise not_found(job_id)
        return log

    def subscribe(self, job_id: str, tenant: str, from_seq: int = 0) -> Subscription:
        if self.keys.enabled:
            self.find(job_id, tenant)
        return self.hub.subscribe(job_id, from_seq, self.config.ws_max_queue)
