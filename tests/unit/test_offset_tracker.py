"""Commit positions when work finishes out of order (pure logic)."""

from aiokafka import TopicPartition

from pipeline.bus import OffsetTracker

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


def test_commits_only_up_to_the_lowest_offset_in_flight():
    t = OffsetTracker()
    for off in (10, 11, 12):
        t.start(A, off)
    t.done(A, 11)
    t.done(A, 12)
    assert t.committable() == {A: 10}  # 10 still running: commit nothing past it
    t.mark_committed({A: 10})
    assert t.committable() == {}
    t.done(A, 10)
    assert t.committable() == {A: 13}


def test_partitions_are_independent_and_counts_are_right():
    t = OffsetTracker()
    t.start(A, 0)
    t.start(B, 5)
    t.done(B, 5)
    assert t.num_in_flight() == 1 and t.num_in_flight(A) == 1 and t.num_in_flight(B) == 0
    assert t.committable() == {A: 0, B: 6}


def test_done_twice_or_after_revocation_is_harmless():
    t = OffsetTracker()
    t.start(A, 3)
    t.done(A, 3)
    t.done(A, 3)
    t.drop({A})
    t.done(A, 3)
    assert t.committable() == {} and t.num_in_flight() == 0
