"""`stepwise worker gateway`: serve the gateway with uvicorn on STEPWISE_GATEWAY_PORT."""

from __future__ import annotations

import logging

import uvicorn

from pipeline.gateway.app import create_app
from pipeline.gateway.settings import GatewayConfig


def main(config: GatewayConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    uvicorn.run(
        create_app(config),
        host=config.host,
        port=config.port,
        log_level="info",
        ws_per_message_deflate=config.ws_deflate,
    )
