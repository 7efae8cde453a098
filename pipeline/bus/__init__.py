"""Kafka wiring (aiokafka): the acks=all producer and the at-least-once consume loop every stage
uses."""

from pipeline.bus.config import (
    BusConfig,
    pacer_for,
)
from pipeline.bus.consume import (
    PAUSED_CHECK_S,
    Ack,
    ConsumeLoop,
    Handler,
    PoisonHandler,
)
from pipeline.bus.fetch_pacing import (
    FetchPacer,
)
from pipeline.bus.offsets import (
    OffsetTracker,
)
from pipeline.bus.producer import (
    Producer,
)
from pipeline.bus.retry import (
    retry_transient,
    start_consumer,
)

__all__ = [
    "Ack",
    "BusConfig",
    "ConsumeLoop",
    "FetchPacer",
    "Handler",
    "OffsetTracker",
    "PAUSED_CHECK_S",
    "PoisonHandler",
    "Producer",
    "pacer_for",
    "retry_transient",
    "start_consumer",
]
