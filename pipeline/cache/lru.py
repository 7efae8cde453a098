"""The in-process L1 in front of Redis, and the counters telemetry reads."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(slots=True)
class CacheStats:
    """Plain counters per level and layer; telemetry reads them (`as_dict`)."""

    answer_l1_hits: int = 0
    answer_l1_misses: int = 0
    answer_l2_hits: int = 0
    answer_l2_misses: int = 0
    answer_puts: int = 0
    answer_refused: int = 0
    step_l1_hits: int = 0
    step_l1_misses: int = 0
    step_l2_hits: int = 0
    step_l2_misses: int = 0
    step_puts: int = 0
    step_refused: int = 0
    prefix_l2_hits: int = 0
    prefix_l2_misses: int = 0  # no owner, or no live owner
    prefix_dead: int = 0  # lookups that had owners, all of them dead
    prefix_puts: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class LRU:
    """Bounded map with an absolute deadline per entry on an injected clock; least recently
    used goes first."""

    def __init__(self, max_entries: int, clock: Callable[[], float]) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self.clock() >= entry[1]:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: str, value: bytes, expires_at: float) -> None:
        if self.max_entries == 0 or expires_at <= self.clock():
            self._entries.pop(key, None)
            return
        self._entries[key] = (value, expires_at)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def pop(self, key: str) -> None:
        self._entries.pop(key, None)
