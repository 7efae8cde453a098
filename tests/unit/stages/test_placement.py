"""Decode placement (pure logic): a handoff goes to the decode worker with the most room,
counting what was sent there since its report; stale, missing or single reports leave it to
the key's partition."""

from __future__ import annotations

import msgspec

from pipeline.stage.placement import DecodeLoad, Placer


def load(worker: str, parts: tuple[int, ...], room: int, kv_free: float = 1.0, ts: int = 1000):
    return DecodeLoad(worker, parts, room, kv_free, ts)


def test_no_reports_or_one_worker_leaves_it_to_the_key():
    placer = Placer()
    assert placer.place("j", 1000) is None
    placer.update([load("a", (0, 1, 2, 3), 10)])
    assert placer.place("j", 1000) is None
    assert placer.num_placed == 0


def test_handoffs_go_where_there_is_room_and_spread_as_it_fills():
    placer = Placer()
    placer.update([load("busy", (0, 1), 1), load("idle", (2, 3), 4)])
    got = ["idle" if placer.place(f"job-{i}", 1000) in (2, 3) else "busy" for i in range(6)]
    # idle's 4 slots against busy's 1: idle until they tie, then turn about (a tie goes to the
    # first reported, KV room being equal).
    assert got == ["idle", "idle", "idle", "busy", "idle", "busy"]
    assert placer.num_placed == 6


def test_a_fresh_report_resets_what_was_counted_for_that_worker():
    placer = Placer()
    placer.update([load("a", (0,), 2), load("b", (1,), 2)])
    assert [placer.place(str(i), 1000) for i in range(4)].count(0) == 2
    # b reports again, full now; a's count still stands (its report is the old one).
    placer.update([load("a", (0,), 2), load("b", (1,), 0, ts=1500)])
    assert placer.sent["a"] == 2 and placer.sent["b"] == 0
    assert placer.place("x", 1600) == 0  # a: 2 - 2 = 0 left; b: 0 left; KV ties: a first


def test_kv_room_breaks_ties_and_stale_reports_are_ignored():
    placer = Placer(stale_ms=3000)
    placer.update([load("a", (0,), 3, kv_free=0.2), load("b", (1,), 3, kv_free=0.9)])
    assert placer.place("j", 1000) == 1
    placer.update([load("a", (0,), 50, ts=1000), load("b", (1,), 3, ts=9000)])
    assert placer.place("j", 9500) is None  # a is stale: one live worker, nothing to choose


def test_a_job_lands_on_the_same_partition_of_its_worker_every_time():
    placer = Placer()
    placer.update([load("a", (4, 5, 6, 7), 100), load("b", (0,), 0)])
    first = placer.place("job-42", 1000)
    assert first in (4, 5, 6, 7)
    assert all(placer.place("job-42", 1000) == first for _ in range(5))
    parts = {placer.place(f"job-{i}", 1000) for i in range(40)}
    assert parts == {4, 5, 6, 7}  # spread over the worker's partitions


def test_a_report_round_trips_through_msgpack():
    report = load("decode-1", (0, 3), 7, 0.5, 1234)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(report), type=DecodeLoad) == report
