"""Mooncake's TransferEngine API over this process's memory, for tests without the wheel.

A read is a memmove from the "remote" address, which here is local; but it must lie inside a
region the session's engine registered, and land inside one the reader registered, as the real
engine demands. `on_read(call_number)` runs before each read (to bump a generation, to stall).
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable


class FakeEngine:
    sessions: dict[str, FakeEngine] = {}
    _ports = itertools.count(20000)
    on_read: Callable[[int], int | None] | None = None  # a non-None return is the read's rc
    reads = 0

    def __init__(self) -> None:
        self.regions: dict[int, int] = {}

    def initialize(self, host: str, metadata: str, protocol: str, device: str) -> int:
        assert (metadata, protocol) == ("P2PHANDSHAKE", "tcp")
        self.port = next(self._ports)
        FakeEngine.sessions[f"{host}:{self.port}"] = self
        return 0

    def get_rpc_port(self) -> int:
        return self.port

    def register_memory(self, address: int, nbytes: int) -> int:
        self.regions[address] = nbytes
        return 0

    def unregister_memory(self, address: int) -> int:
        return 0 if self.regions.pop(address, None) is not None else -1

    def _inside(self, address: int, n: int) -> bool:
        return any(a <= address and address + n <= a + size for a, size in self.regions.items())

    def batch_transfer_sync_read(
        self, session: str, local: list[int], remote: list[int], lengths: list[int]
    ) -> int:
        FakeEngine.reads += 1
        if FakeEngine.on_read is not None and (rc := FakeEngine.on_read(FakeEngine.reads)):
            return rc
        peer = FakeEngine.sessions.get(session)
        if peer is None:
            return -1
        for here, there, n in zip(local, remote, lengths, strict=True):
            assert self._inside(here, n), "a read into memory the reader did not register"
            assert peer._inside(there, n), "a read from memory the peer did not register"
            ctypes.memmove(here, there, n)
        return 0


def install(monkeypatch) -> type[FakeEngine]:
    """Route pipeline.transfer.mooncake to the fake engine (state reset)."""
    from pipeline.transfer import mooncake

    FakeEngine.sessions, FakeEngine.on_read, FakeEngine.reads = {}, None, 0
    monkeypatch.setattr(mooncake, "engine_class", lambda: FakeEngine)
    return FakeEngine
