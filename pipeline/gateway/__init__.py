"""The gateway: HTTP, WebSocket and OpenAI-compatible access to the pipeline (docs/gateway.md)."""

from pipeline.gateway.app import create_app
from pipeline.gateway.settings import GatewayConfig

__all__ = ["GatewayConfig", "create_app"]
