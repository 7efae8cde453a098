"""The fetch pacer: short waits while records flow, long ones after an idle spell."""

from __future__ import annotations

from pipeline.bus import BusConfig, pacer_for
from pipeline.bus.fetch_pacing import FetchPacer


def test_busy_until_idle_after_then_idle_until_a_record():
    pacer = FetchPacer(busy_ms=4, idle_ms=100, idle_after_s=2.0)
    assert pacer.observe(0, 10.0) == 4  # the clock starts at the first poll: not idle yet
    assert pacer.observe(3, 10.5) == 4
    assert pacer.observe(0, 12.4) == 4  # 1.9 s without a record
    assert pacer.observe(0, 12.5) == 100  # 2.0 s: idle
    assert pacer.observe(0, 60.0) == 100
    assert pacer.observe(1, 60.1) == 4  # one record and it is busy again at once
    assert pacer.observe(0, 61.0) == 4


def test_pacer_from_bus_config():
    pacer = pacer_for(BusConfig("k:1", fetch_max_wait_ms=7, idle_fetch_wait_ms=300, idle_after_s=1))
    assert (pacer.busy_ms, pacer.idle_ms, pacer.idle_after_s) == (7, 300, 1)


def test_apply_sets_the_wait_aiokafka_reads_for_each_fetch():
    # The fetcher exists once the consumer started; the attribute it builds requests from is
    # the one apply() sets (a renamed attribute in a later aiokafka fails here, not silently).
    class Fetcher:
        _fetch_max_wait_ms = 4

    class Consumer:  # the part of AIOKafkaConsumer apply() touches
        _fetcher = Fetcher()

    consumer = Consumer()
    pacer = FetchPacer(idle_after_s=0.5)
    pacer.apply(consumer, 0, 1.0)
    assert consumer._fetcher._fetch_max_wait_ms == 4
    pacer.apply(consumer, 0, 2.0)
    assert consumer._fetcher._fetch_max_wait_ms == 100
    pacer.apply(consumer, 5, 2.1)
    assert consumer._fetcher._fetch_max_wait_ms == 4


def test_aiokafka_fetcher_builds_requests_from_the_attribute_set():
    import inspect

    from aiokafka.consumer import fetcher

    source = inspect.getsource(fetcher.Fetcher._get_actions_per_node)
    assert "self._fetch_max_wait_ms" in source
