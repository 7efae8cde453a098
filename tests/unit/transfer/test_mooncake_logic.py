"""The mooncake transport's own logic, without the wheel: where the bytes are, which way a
handoff's KV comes, the generation checks and the deadline (Mooncake's engine API is faked over
this process's memory: tests/unit/transfer/fake_mooncake.py; the real engine is in
test_mooncake.py)."""

from __future__ import annotations

import sys
import threading
import time

import msgspec
import pytest
import torch

from pipeline import schema
from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.transfer import TransferExpiredError, mooncake
from pipeline.transfer.kv_export import PinnedExporter, make_exporter
from pipeline.transfer.kv_import import KVImporter
from pipeline.transfer.mooncake import (
    MooncakeReader,
    MooncakeServer,
    MooncakeUnavailableError,
    PoolLayout,
    TransferTimeoutError,
    copy_plan,
    generations_plan,
    runs,
)
from pipeline.transfer.shm_pool import HEADER, SharedKVPool, data_offset
from tests.unit.transfer import fake_mooncake

BLOCK = (2, 2, 3, 4, 8)  # layers, K/V, kv_heads, block_size, head_dim
PARAMS = SamplingParams(temperature=0.8, seed=77, max_tokens=24, ignore_eos=True)


def test_runs_group_consecutive_block_ids_in_table_order():
    assert runs([5, 6, 7, 2, 3, 9]) == [(5, 3), (2, 2), (9, 1)]
    assert runs([4]) == [(4, 1)] and runs([]) == []


def test_the_copy_plan_moves_exactly_the_named_blocks():
    """Applied byte by byte, the plan turns blocks of a segment's pool into the first blocks
    of the staging pool, in the table's order."""
    num_blocks, blocks = 12, [7, 8, 2, 3, 4, 11]
    src = PoolLayout.segment(BLOCK, 4, num_blocks)
    dst = PoolLayout.of(BLOCK, 4, 8, 64)
    assert src.start == data_offset(num_blocks) and src.planes == 12 and src.block_bytes == 128
    seg = torch.randint(0, 255, (src.nbytes,), dtype=torch.uint8)
    staging = torch.zeros(dst.nbytes, dtype=torch.uint8)
    remote, local, lengths = copy_plan(src, blocks, dst)
    assert len(lengths) == 3 * src.planes  # one chunk per run and plane
    for r, lo, n in zip(remote, local, lengths, strict=True):
        staging[lo : lo + n] = seg[r : r + n]
    shape = (2, 2, 3, -1, 4, 8)
    pool = seg[src.start :].view(torch.int32).view(shape)  # (random bytes: NaNs as floats)
    staged = staging[dst.start :].view(torch.int32).view(shape)
    assert torch.equal(staged[:, :, :, : len(blocks)], pool[:, :, :, blocks])


def test_the_generations_plan_reads_each_run_of_int64s_after_the_header():
    assert generations_plan([5, 6, 2]) == ([HEADER + 40, HEADER + 16], [0, 16], [16, 8])


def descriptor(**kw) -> schema.KVDescriptor:
    base = dict(
        transport="shm_pool", handle="sw1_pool_ab#3", num_tokens=20, num_layers=2,
        num_kv_heads=3, head_dim=8, dtype="float32", nbytes=4096, owner="prefill-1",
        expires_ms=1, block_size=4, blocks=[1, 2], block_gens=[3, 4],
    )  # fmt: skip
    return schema.KVDescriptor(**{**base, **kw})


def test_descriptor_fields_are_optional_and_checked():
    dec = msgspec.msgpack.Decoder(schema.KVDescriptor)
    old = dec.decode(msgspec.msgpack.encode(descriptor()))  # a producer without them
    assert old.session is None and old.pool_addr is None and old.pool_blocks is None
    d = descriptor(session="10.1.2.3:15123", pool_addr=0x7F00_0000_1000, pool_blocks=64)
    assert dec.decode(msgspec.msgpack.encode(d)) == d
    for bad in ({"session": "a host:1"}, {"session": "h"}, {"pool_addr": 0}, {"pool_blocks": 0}):
        raw = msgspec.msgpack.encode({**msgspec.structs.asdict(d), **bad})
        with pytest.raises(msgspec.ValidationError):
            dec.decode(raw)


def test_the_route_is_in_place_on_this_host_and_mooncake_elsewhere_or_when_told(monkeypatch):
    fake_mooncake.install(monkeypatch)
    shared = SharedKVPool()
    shared.storage(16, 16 * 384, torch.float32)
    try:
        here = descriptor(handle=f"{shared.name}#1", session="127.0.0.1:1", pool_blocks=16)
        importer = KVImporter("shm_pool", mooncake_host="127.0.0.1", read_timeout_ms=500)
        assert importer.route(descriptor()) == "shm_pool"  # not served over Mooncake
        assert importer.route(here) == "shm_pool"  # its segment maps here
        assert importer.route(msgspec.structs.replace(here, pool_blocks=8)) == "mooncake"
        elsewhere = msgspec.structs.replace(here, handle="sw1_pool_nothere#1")
        assert importer.route(elsewhere) == "mooncake"
        forced = KVImporter("mooncake", mooncake_host="127.0.0.1", read_timeout_ms=500)
        assert forced.route(here) == "mooncake" and forced.route(descriptor()) == "shm_pool"
        assert forced.route(descriptor(transport="shm")) == "shm"
    finally:
        shared.close()


@pytest.fixture
def served(monkeypatch):
    """A segment pool of 16 blocks with random contents and generations, served by a fake
    engine: (pool view, generations, server, reader)."""
    fake = fake_mooncake.install(monkeypatch)
    shared = SharedKVPool()
    layers, two, kvh, bs, d = BLOCK
    kv, gens = shared.storage(16, layers * two * kvh * 16 * bs * d, torch.float32)
    kv.copy_(torch.randn(kv.numel()))
    for b in range(16):
        gens[b] = 100 + b
    server = MooncakeServer("127.0.0.1")
    assert shared.segment is not None
    server.serve(shared.address, shared.segment.size)
    reader = MooncakeReader("127.0.0.1", timeout_ms=300)
    yield kv.view(layers, two, kvh, 16, bs, d), gens, server, reader, fake
    fake.on_read = None
    reader.close()
    server.close()
    shared.close()


def read(served, blocks: list[int], gens: list[int] | None = None) -> torch.Tensor:
    pool, generations, server, reader, _ = served
    expected = [generations[b] for b in blocks] if gens is None else gens
    return reader.read(server.session, server.address, 16, torch.float32, BLOCK, blocks, expected)


def test_a_read_brings_the_pinned_blocks_and_grows_its_staging(served):
    pool = served[0]
    staged = read(served, [3, 4, 9])
    assert torch.equal(staged[:, :, :, :3], pool[:, :, :, [3, 4, 9]])
    first = served[3].staging.data_ptr()  # room for 16 blocks at first
    blocks = list(range(15, -1, -1)) + [0, 1, 2, 3]  # more than that: grown
    staged = read(served, blocks)
    assert torch.equal(staged[:, :, :, :20], pool[:, :, :, blocks])
    reader = served[3]  # the old buffer unregistered, the new one registered
    assert reader.staging.data_ptr() != first
    assert list(reader.engine.regions) == [reader.staging.data_ptr()]


def test_reused_blocks_fail_before_or_during_the_copy(served):
    pool, gens, _, _, fake = served
    with pytest.raises(TransferExpiredError, match="reused$"):
        read(served, [1, 2], [101, 99])  # already reused when the read starts

    def reuse_block_2(n: int) -> None:  # reads: generations, data, generations
        if n % 3 == 2:
            gens[2] += 1

    fake.reads, fake.on_read = 0, reuse_block_2
    with pytest.raises(TransferExpiredError, match="reused during the copy"):
        read(served, [1, 2])


def test_a_failed_read_is_expired(served):
    served[4].on_read = lambda n: -1
    with pytest.raises(TransferExpiredError, match="failed"):
        read(served, [1])


def test_a_stalled_read_ends_at_its_deadline_and_blocks_nothing_after(served):
    """Neither read waits for the stalled call: it is still on (only `release` ends it) when
    each has raised. (No wall-clock bound: a loaded CI machine stalls any thread for longer
    than a deadline's margin.)"""
    release = threading.Event()
    served[4].on_read = lambda n: release.wait(60) and None

    def stalled() -> bool:
        busy = served[3]._caller.busy
        return busy is not None and not busy.done()

    with pytest.raises(TransferTimeoutError, match="300 ms deadline"):
        read(served, [1])
    assert stalled()
    with pytest.raises(TransferTimeoutError, match="still on"):  # the stalled call holds on
        read(served, [1])
    assert stalled()
    served[4].on_read = None
    release.set()
    while stalled():
        time.sleep(0.01)
    assert torch.equal(read(served, [5])[:, :, :, :1], served[0][:, :, :, [5]])


def test_a_handoff_crosses_over_mooncake_and_decoding_continues_exactly(monkeypatch, llama_dir):
    """Export (pin, describe) and import (route, read, check, import) end to end, the engine
    faked: the tokens are those of one engine doing it all, and `last` says what happened."""
    fake_mooncake.install(monkeypatch)
    config = EngineConfig(model=str(llama_dir), dtype="float32", num_kv_blocks=64)
    ids = list(range(3, 40))
    expected = Engine(config).generate([ids], PARAMS)[0].token_ids
    exporter = make_exporter("mooncake", "prefill-1", 1 << 20, 30_000, "127.0.0.1")
    assert isinstance(exporter, PinnedExporter)
    small = EngineConfig(model=str(llama_dir), dtype="float32", num_kv_blocks=8)
    src = Engine(small, exporter.kv_storage)
    exporter.bind(src)
    try:
        seq = src.add(Request("r", ids, PARAMS))
        while seq.num_output_tokens < 1:
            src.step()
        kv = exporter.export(src, seq)
        assert kv is not None and kv.session == exporter.server.session
        assert kv.pool_addr == exporter.shared.address and kv.pool_blocks == 8
        src.abort("r")  # pinned: the blocks stay
        h = schema.Handoff(
            id="r", model="m", token_ids=ids, budget=schema.Budget(max_steps=1,
            max_thinking_tokens=1), admitted_ms=0, first_token=seq.token_ids[len(ids)],
            first_logprob=0.0, kv=kv, prefill_worker="prefill-1", prefill_ms=1, seed=seq.seed,
        )  # fmt: skip
        importer = KVImporter("mooncake", mooncake_host="127.0.0.1", read_timeout_ms=2000)
        dst = Engine(config)
        got = importer.import_kv(dst, h, PARAMS)
        last = importer.last
        assert last is not None and last.ok and last.transport == "mooncake"
        assert last.nbytes == kv.nbytes and last.ms > 0
        while dst.has_unfinished():
            dst.step()
        assert got.output_token_ids == expected and dst.stats.num_prefill_tokens == 0
        # A read begun ahead for a job that then fails to start is let go of.
        assert importer.begin(h) and importer.reading == "r"
        importer.forget("another")
        assert importer.reading == "r"
        importer.forget("r")
        assert importer.reading is None
        busy = importer._mooncake._caller.busy
        assert busy is not None
        busy.result(timeout=2)
        # The blocks reused after the lease: the import fails, and says why.
        exporter.release(src, [kv.handle])
        reuse = list(range(100, 100 + 8 * src.kv_cache.block_size - 1))  # every block
        src.generate([reuse], SamplingParams(temperature=0, max_tokens=1))
        with pytest.raises(TransferExpiredError):
            importer.import_kv(Engine(config), h, PARAMS)
        assert importer.last.error == "transfer_expired" and "reused" in importer.last.reason
    finally:
        exporter.close()


def test_without_the_wheel_mooncake_fails_at_start_and_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mooncake", None)
    monkeypatch.setitem(sys.modules, "mooncake.engine", None)
    with pytest.raises(MooncakeUnavailableError, match="mooncake-transfer-engine") as e:
        make_exporter("mooncake", "p", 1 << 20, 1000)
    assert "libibverbs1" in str(e.value) and e.value.code == "mooncake_unavailable"
    with pytest.raises(MooncakeUnavailableError):
        KVImporter("mooncake", mooncake_host="", read_timeout_ms=100)
    assert not mooncake.available()
    make_exporter("shm_pool", "p", 1 << 20, 1000).close()  # everything else works
    importer = KVImporter("shm_pool", mooncake_host="", read_timeout_ms=100)
    # A pool on another host cannot be read here: an error decode re-prefills on.
    remote = descriptor(session="10.9.9.9:1", pool_addr=4096, pool_blocks=16)
    h = schema.Handoff(
        id="r", model="m", token_ids=[1, 2, 3, 4, 5], admitted_ms=0, first_token=1,
        budget=schema.Budget(max_steps=1, max_thinking_tokens=1), first_logprob=0.0, kv=remote,
        prefill_worker="p", prefill_ms=1, seed=1,
    )  # fmt: skip
    with pytest.raises(MooncakeUnavailableError):
        importer.import_kv(None, h, PARAMS)  # type: ignore[arg-type]
    assert importer.last.transport == "mooncake" and importer.last.error == "mooncake_unavailable"
