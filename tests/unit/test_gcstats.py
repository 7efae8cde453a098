"""The collector's pauses are counted per generation, and freezing takes live objects out of
what a full collection walks."""

from __future__ import annotations

import gc

from pipeline.telemetry import gcstats


def test_gc_stats_count_each_generation() -> None:
    stats = gcstats.GCStats().install()
    try:
        gc.collect(2)
        gc.collect(0)
    finally:
        stats.uninstall()
    got = stats.as_dict()
    assert got["gen2_count"] >= 1 and got["gen0_count"] >= 1
    assert got["gen2_max_s"] > 0 and got["gen2_s"] >= got["gen2_max_s"]
    before = dict(got)
    gc.collect(2)  # uninstalled: no longer counted
    assert stats.as_dict() == before


def test_freeze_moves_live_objects_out_of_the_collector() -> None:
    keep = [[i] for i in range(10_000)]  # containers the collector would track
    try:
        frozen = gcstats.freeze()
        assert frozen >= len(keep)
        # Not equal: frozen objects that other code frees afterwards leave the count.
        assert len(keep) <= gc.get_freeze_count() <= frozen
        # A full collection now walks only what was made since: not the frozen lists.
        assert sum(len(g) for g in (gc.get_objects(0), gc.get_objects(1))) < len(keep)
        assert len(gc.get_objects(2)) < frozen
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual
