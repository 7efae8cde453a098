"""The gateway's configuration: one object, every setting declared beside its field
(pipeline/settings.py), built from the process's settings (`GatewayConfig.from_settings`)."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field

from pipeline.config import PipelineConfig
from pipeline.errors import StepwiseError
from pipeline.gateway.limits import RateLimit
from pipeline.settings import Settings, build, current, declared, setting


class InsecureGatewayError(StepwiseError):
    """A gateway that would serve anyone who can reach it, beyond this machine, as one tenant."""

    code = "insecure_gateway"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or `localhost`. Any other address, `0.0.0.0` and `::` included, and any
    other name (where it resolves is not ours to assume) may be reachable from elsewhere."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, port: int, *, has_keys: bool, allow_open: bool) -> str | None:
    """Refuse a gateway without API keys bound beyond loopback (InsecureGatewayError), unless
    `allow_open` says it is meant: then the warning to log at start. None: nothing to say."""
    if has_keys or is_loopback(host):
        return None
    if not allow_open:
        raise InsecureGatewayError(
            f"the gateway would listen on {host}:{port} with no API keys, so anyone who can "
            "reach it could run jobs and read every job as tenant `default`. Configure keys "
            "(STEPWISE_API_KEYS=key:tenant,... or STEPWISE_API_KEYS_REDIS=1), or run it open on "
            "purpose with --allow-open (STEPWISE_GATEWAY_ALLOW_OPEN=1); or bind loopback "
            "(STEPWISE_GATEWAY_HOST=127.0.0.1)"
        )
    return (
        f"OPEN GATEWAY: listening on {host}:{port} with no API keys (allow-open): anyone who "
        "can reach it runs jobs and reads every job as tenant `default`"
    )


def _pairs(spec: str, env_name: str, shape: str) -> list[tuple[str, str]]:
    """`a:x, b:y` -> [("a", "x"), ("b", "y")]; a malformed entry is a ValueError."""
    pairs = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition(":")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"{env_name} entries are {shape}, got {item!r}")
        pairs.append((name.strip(), value.strip()))
    return pairs


def parse_api_keys(spec: str) -> dict[str, str]:
    """`key1:tenantA,key2:tenantB` -> {key: tenant}; empty -> {} (auth off)."""
    return dict(_pairs(spec, "STEPWISE_API_KEYS", "key:tenant"))


def parse_rate_limits(spec: str) -> dict[str, RateLimit]:
    """`tenantA:10/20,tenantB:0.5` -> {tenant: RateLimit(jobs/s, burst)}; burst defaults to
    the rate rounded up (at least 1)."""
    limits = {}
    for tenant, value in _pairs(spec, "STEPWISE_TENANT_RATES", "tenant:rate[/burst]"):
        rate, _, burst = value.partition("/")
        try:
            limits[tenant] = rate_limit(float(rate), int(burst) if burst else None)
        except ValueError:
            raise ValueError(f"STEPWISE_TENANT_RATES: bad rate for {tenant!r}: {value!r}") from None
    return limits


def rate_limit(rate: float, burst: int | None = None) -> RateLimit:
    return RateLimit(rate, burst if burst is not None else max(1, math.ceil(rate)))


GATEWAY_HOST = "GATEWAY_HOST"
GATEWAY_PORT = "GATEWAY_PORT"  # read by `stepwise stream` for the local gateway's address


@declared
@dataclass(slots=True)
class GatewayConfig:
    """Where the pipeline is and how the gateway serves it."""

    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    port: int = setting(8000, env=GATEWAY_PORT, concern="gateway",
                        help="HTTP / WebSocket / OpenAI API port")  # fmt: skip
    # Beyond loopback it needs API keys, or allow_open.
    host: str = setting(
        "127.0.0.1",
        env=GATEWAY_HOST,
        concern="gateway",
        flag="--host",
        help="address the gateway binds (beyond loopback: API keys, or --allow-open)",
    )
    allow_open: bool = setting(
        False,
        env="GATEWAY_ALLOW_OPEN",
        concern="gateway",
        flag="--allow-open",
        help="serve beyond loopback with no API keys (warned at start); else such a gateway "
        "refuses",
    )
    api_keys: dict[str, str] = setting(
        env="API_KEYS",
        concern="gateway",
        kind=parse_api_keys,
        factory=dict,
        secret=True,
        help="key:tenant,...; empty: no auth, tenant `default`",
    )
    api_keys_redis: bool = setting(
        False,
        env="API_KEYS_REDIS",
        concern="gateway",
        help="also accept keys from Redis ({prefix}apikeys)",
    )
    key_cache_ttl_s: float = setting(
        5.0,
        env="KEY_CACHE_TTL_S",
        concern="gateway",
        help="Redis-held keys (and unknown keys) are cached this long",
    )
    tenant_max_inflight: int = setting(
        0,
        env="TENANT_MAX_INFLIGHT",
        concern="gateway",
        help="jobs without a Result per tenant (this gateway); 0: no limit",
    )
    tenant_rate: float = setting(0.0, env="TENANT_RATE", concern="gateway",
                                 help="jobs/s per tenant; 0: no limit")  # fmt: skip
    tenant_burst: int | None = setting(
        None,
        env="TENANT_BURST",
        concern="gateway",
        kind=int,
        help="burst of TENANT_RATE; empty: the rate rounded up",
    )
    tenant_rates: dict[str, RateLimit] = setting(
        env="TENANT_RATES",
        concern="gateway",
        kind=parse_rate_limits,
        factory=dict,
        help="per-tenant rates: tenant:rate[/burst],...",
    )
    ws_max_queue: int = setting(
        1000,
        env="WS_MAX_QUEUE",
        concern="gateway",
        help="events a WebSocket may fall behind before it is closed",
    )
    # permessage-deflate costs zlib CPU on both ends for every event and saves little on
    # ~200-byte JSON messages: off unless asked for (bench/RESULTS.md, gateway load)
    ws_deflate: bool = setting(False, env="WS_DEFLATE", concern="gateway",
                               help="permessage-deflate on WebSockets")  # fmt: skip
    max_jobs: int = 10_000  # job logs kept in memory (oldest finished ones go first)
    max_events_per_job: int = 10_000  # older events of a longer job are dropped
    result_timeout_s: float = 300.0  # chat completions wait this long for a Result
    final_grace_s: float = 2.0  # after an ok Result, wait this long for its `final` event

    @classmethod
    def from_settings(cls, source: Settings | None = None, **overrides: object) -> GatewayConfig:
        """The gateway's config from the process's settings (and its pipeline's)."""
        source = source or current()
        return build(cls, source, pipeline=build(PipelineConfig, source), **overrides)

    @property
    def tenant_limit(self) -> RateLimit:
        """Every tenant's rate limit but the named ones': jobs/s and burst (rate 0: none)."""
        return rate_limit(self.tenant_rate, self.tenant_burst)

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be 1-65535, got {self.port}")
        if self.ws_max_queue < 1 or self.max_jobs < 1 or self.max_events_per_job < 1:
            raise ValueError("ws_max_queue, max_jobs and max_events_per_job must be positive")
        if self.tenant_max_inflight < 0:
            raise ValueError("tenant_max_inflight must be >= 0")
        if self.key_cache_ttl_s < 0:
            raise ValueError("key_cache_ttl_s must be >= 0")
        if self.api_keys_redis and not self.pipeline.redis:
            raise ValueError("STEPWISE_API_KEYS_REDIS needs STEPWISE_REDIS")
        self.exposure_warning()  # an open gateway beyond loopback refuses here, before binding

    def exposure_warning(self) -> str | None:
        """What to warn of at start (open beyond loopback on purpose); refuses it unasked."""
        has_keys = bool(self.api_keys) or self.api_keys_redis
        return check_exposure(self.host, self.port, has_keys=has_keys, allow_open=self.allow_open)

    @property
    def model_name(self) -> str:
        return self.pipeline.model
