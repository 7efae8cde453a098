"""The exporter's bounded, leased pool (pure logic, with an in-memory transport)."""

from contextlib import contextmanager

import pytest
import torch

from pipeline.transfer.base import ExportPool, ExportPoolFullError


class MemoryTransport:
    name = "memory"

    def __init__(self):
        self.live = {}
        self.n = 0

    def allocate(self, shape, dtype):
        self.n += 1
        self.live[str(self.n)] = torch.empty(shape, dtype=dtype)
        return str(self.n), self.live[str(self.n)]

    def release(self, handle):
        del self.live[handle]

    @contextmanager
    def attach(self, handle):
        yield self.live[handle.handle]


SHAPE = (2, 2, 1, 8, 4)  # 128 floats = 512 bytes


def test_export_ack_releases_and_bounds_bytes():
    t = MemoryTransport()
    pool = ExportPool(t, "w1", max_bytes=1024, lease_ms=10_000)
    h1, buf = pool.export(SHAPE, torch.float32)
    assert buf.shape == SHAPE and h1.nbytes == 512 and h1.owner == "w1" and h1.num_tokens == 8
    pool.export(SHAPE, torch.float32)
    assert pool.used_bytes == 1024 and not pool.can_export(1)
    with pytest.raises(ExportPoolFullError, match="full"):
        pool.export(SHAPE, torch.float32)
    assert pool.ack(h1.handle) and not pool.ack(h1.handle)
    assert pool.used_bytes == 512 and len(t.live) == 1


def test_expired_leases_are_reaped_and_make_room():
    t = MemoryTransport()
    pool = ExportPool(t, "w1", max_bytes=1024, lease_ms=1_000)
    h1, _ = pool.export(SHAPE, torch.float32)
    h2, _ = pool.export(SHAPE, torch.float32)
    assert pool.reap(at_ms=h1.expires_ms - 1) == []
    assert sorted(pool.reap(at_ms=h2.expires_ms)) == sorted([h1.handle, h2.handle])
    assert pool.used_bytes == 0 and pool.num_expired == 2 and t.live == {}


def test_an_export_larger_than_the_pool_is_refused_outright():
    pool = ExportPool(MemoryTransport(), "w1", max_bytes=100)
    with pytest.raises(ExportPoolFullError, match="exceeds"):
        pool.export(SHAPE, torch.float32)


def test_close_releases_everything():
    t = MemoryTransport()
    pool = ExportPool(t, "w1", max_bytes=4096)
    for _ in range(3):
        pool.export(SHAPE, torch.bfloat16)
    pool.close()
    assert t.live == {} and pool.num_live == 0
