"""What a client of a running stack reads from the settings (`stepwise stream`)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.settings import declared, setting


@declared
@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Where `stepwise stream` finds the gateway, and the key it sends."""

    gateway_url: str = setting(
        "", env="GATEWAY_URL", concern="client",
        help="the gateway for `stepwise stream`; empty: 127.0.0.1:GATEWAY_PORT",
    )  # fmt: skip
    api_key: str = setting(
        "", env="API_KEY", concern="client", secret=True,
        help="the key `stepwise stream` sends",
    )  # fmt: skip
