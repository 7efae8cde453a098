"""Idle cheap, busy fast: how long a consumer's fetch may wait at the broker.

The embedded broker (Tansu) answers a fetch only when its `fetch_max_wait_ms` runs out, even
when records are there, so the wait bounds a hop's latency (4 ms: p50 hops under 5 ms) and
also sets how often every consumer polls when nothing happens: 250 fetches a second each, most
of an idle stack's CPU (bench/idle_cpu.py). The pacer keeps the short wait while records flow
and switches to a long one after `idle_after_s` with none; the first record after an idle spell
waits for at most one long fetch per hop, then the short wait is back.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer


@dataclass(slots=True)
class FetchPacer:
    """The fetch wait to use next: `busy_ms` until `idle_after_s` pass with no record."""

    busy_ms: int = 4
    idle_ms: int = 100
    idle_after_s: float = 2.0
    _last_record_s: float | None = None
    wait_ms: int = 4

    def observe(self, num_records: int, now_s: float) -> int:
        """The wait for the next fetch, given how many records the last poll brought."""
        if num_records or self._last_record_s is None:
            self._last_record_s = now_s
        idle = now_s - self._last_record_s >= self.idle_after_s
        self.wait_ms = self.idle_ms if idle else self.busy_ms
        return self.wait_ms

    def apply(self, consumer: AIOKafkaConsumer, num_records: int, now_s: float) -> None:
        """Set the consumer's next fetch wait. aiokafka's fetcher reads `_fetch_max_wait_ms`
        for every request it builds; there is no public setter."""
        wait = self.observe(num_records, now_s)
        fetcher = getattr(consumer, "_fetcher", None)
        if fetcher is not None and getattr(fetcher, "_fetch_max_wait_ms", wait) != wait:
            fetcher._fetch_max_wait_ms = wait  # noqa: SLF001
