"""Clients of a running stack: over Kafka (StepwiseClient) and over the gateway's WebSocket
(GatewayClient); stream_view renders a stream in a terminal."""

from pipeline.client.clients import (
    RESUMABLE_CLOSES,
    GatewayClient,
    GatewayStreamError,
    StepwiseClient,
    current_chain,
    stream_url,
)

__all__ = [
    "GatewayClient",
    "GatewayStreamError",
    "RESUMABLE_CLOSES",
    "StepwiseClient",
    "current_chain",
    "stream_url",
]
