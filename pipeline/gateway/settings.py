"""The gateway's configuration: one object, read from STEPWISE_* env vars."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pipeline.config import PipelineConfig


def parse_api_keys(spec: str) -> dict[str, str]:
    """`key1:tenantA,key2:tenantB` -> {key: tenant}; empty -> {} (auth off)."""
    keys: dict[str, str] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, tenant = item.partition(":")
        if not sep or not key.strip() or not tenant.strip():
            raise ValueError(f"STEPWISE_API_KEYS entries are key:tenant, got {item!r}")
        keys[key.strip()] = tenant.strip()
    return keys


@dataclass(slots=True)
class GatewayConfig:
    """Where the pipeline is and how the gateway serves it."""

    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    port: int = 8000
    host: str = "0.0.0.0"
    api_keys: dict[str, str] = field(default_factory=dict)  # empty: auth off, tenant "default"
    tenant_max_inflight: int = 0  # jobs without a Result per tenant (this gateway); 0: no limit
    ws_max_queue: int = 1000  # events a WebSocket may fall behind before it is closed
    max_jobs: int = 10_000  # job logs kept in memory (oldest finished ones go first)
    max_events_per_job: int = 10_000  # older events of a longer job are dropped
    result_timeout_s: float = 300.0  # chat completions wait this long for a Result
    final_grace_s: float = 2.0  # after an ok Result, wait this long for its `final` event

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be 1-65535, got {self.port}")
        if self.ws_max_queue < 1 or self.max_jobs < 1 or self.max_events_per_job < 1:
            raise ValueError("ws_max_queue, max_jobs and max_events_per_job must be positive")
        if self.tenant_max_inflight < 0:
            raise ValueError("tenant_max_inflight must be >= 0")

    @property
    def model_name(self) -> str:
        return self.pipeline.model

    @classmethod
    def from_env(cls, **overrides: object) -> GatewayConfig:
        env = os.environ.get
        values: dict[str, object] = {
            "pipeline": PipelineConfig.from_env(),
            "port": int(env("STEPWISE_GATEWAY_PORT") or 8000),
            "host": env("STEPWISE_GATEWAY_HOST") or "0.0.0.0",
            "api_keys": parse_api_keys(env("STEPWISE_API_KEYS") or ""),
            "tenant_max_inflight": int(env("STEPWISE_TENANT_MAX_INFLIGHT") or 0),
            "ws_max_queue": int(env("STEPWISE_WS_MAX_QUEUE") or 1000),
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
