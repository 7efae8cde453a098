"""What is safe to commit when work ends out of order: per-partition in-flight offsets."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from aiokafka import TopicPartition

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _PartitionState:
    in_flight: set[int] = field(default_factory=set)
    next_offset: int = -1  # one past the highest offset fetched
    committed: int = -1  # last offset value we committed (next record to read)


class OffsetTracker:
    """Per-partition in-flight offsets; what is safe to commit when work ends out of order."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _PartitionState] = {}

    def start(self, tp: TopicPartition, offset: int) -> None:
        st = self._parts.setdefault(tp, _PartitionState())
        st.in_flight.add(offset)
        st.next_offset = max(st.next_offset, offset + 1)

    def done(self, tp: TopicPartition, offset: int) -> None:
        st = self._parts.get(tp)
        if st is not None:  # the partition may have been revoked meanwhile
            st.in_flight.discard(offset)

    def num_in_flight(self, tp: TopicPartition | None = None) -> int:
        if tp is not None:
            st = self._parts.get(tp)
            return len(st.in_flight) if st else 0
        return sum(len(st.in_flight) for st in self._parts.values())

    def committable(self) -> dict[TopicPartition, int]:
        """{partition: offset to commit} where the low watermark moved since the last commit."""
        out = {}
        for tp, st in self._parts.items():
            if st.next_offset < 0:
                continue
            low = min(st.in_flight) if st.in_flight else st.next_offset
            if low > st.committed:
                out[tp] = low
        return out

    def mark_committed(self, offsets: dict[TopicPartition, int]) -> None:
        for tp, off in offsets.items():
            if tp in self._parts:
                self._parts[tp].committed = off

    def drop(self, tps: set[TopicPartition]) -> None:
        for tp in tps:
            self._parts.pop(tp, None)
