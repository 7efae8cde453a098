"""Handoff in place: decode copies pinned blocks straight out of prefill's shared pool."""

import textwrap

import pytest
import torch

from pipeline.engine import Engine, EngineConfig, KVBlocks, KVExport, Request, SamplingParams
from pipeline.transfer.base import TransferExpiredError
from pipeline.transfer.shm_pool import PinLeases, PoolReader, SharedKVPool
from tests.unit.transfer.importer import REPORT, run_importer

PARAMS = SamplingParams(temperature=0.8, seed=77, max_tokens=24, ignore_eos=True)

IMPORTER = (
    textwrap.dedent(
        """
    import json, sys, torch
    from pipeline.engine import Engine, EngineConfig, KVBlocks, KVExport, SamplingParams
    from pipeline.transfer.shm_pool import PoolReader
    msg = json.loads(sys.stdin.read())
    engine = Engine(EngineConfig(model=msg["model"], dtype="float32", num_kv_blocks=64))
    with PoolReader().read(msg["pool"], torch.float32, tuple(msg["block_shape"]),
                           msg["blocks"], msg["gens"]) as pool:
        kv = KVBlocks(pool, msg["blocks"], msg["num_kv_tokens"])
        export = KVExport("r", msg["token_ids"], msg["num_prompt_tokens"], kv, msg["seed"])
        seq = engine.import_kv(export, SamplingParams(**msg["params"]))
    """
    )
    + REPORT
)


def prefilled(llama_dir, shared: SharedKVPool, ids: list[int], num_kv_blocks: int = 64):
    """An engine on `shared`, with request "r" prefilled up to its first token."""
    config = EngineConfig(model=str(llama_dir), dtype="float32", num_kv_blocks=num_kv_blocks)
    engine = Engine(config, shared.storage)
    seq = engine.add(Request("r", ids, PARAMS))
    while seq.num_output_tokens < 1:  # prefill + first token, as a prefill worker does
        engine.step()
    return engine, seq


def block_shape(engine: Engine) -> tuple[int, ...]:
    layers, two, kvh, _, bs, d = engine.kv_cache.kv.shape
    return (layers, two, kvh, bs, d)


def test_pinned_blocks_cross_processes_and_decoding_continues_exactly(llama_dir):
    ids = torch.randint(0, 320, (37,), generator=torch.Generator().manual_seed(5)).tolist()
    expected = Engine(EngineConfig(model=str(llama_dir), dtype="float32", num_kv_blocks=64))
    expected = expected.generate([ids], PARAMS)[0].token_ids
    shared = SharedKVPool()
    try:
        src, seq = prefilled(llama_dir, shared, ids)
        pinned = src.pin_kv("r")
        token_ids, n = list(seq.token_ids), seq.num_computed_tokens
        src.abort("r")  # the sequence ends; its pinned blocks stay put
        assert pinned.num_tokens == n and len(pinned.blocks) == -(-n // src.kv_cache.block_size)
        assert all(src.block_manager.blocks[b].ref_count == 1 for b in pinned.blocks)
        msg = {
            "model": str(llama_dir),
            "pool": shared.name,
            "block_shape": block_shape(src),
            "blocks": pinned.blocks,
            "gens": pinned.generations,
            "token_ids": token_ids,
            "num_prompt_tokens": len(ids),
            "num_kv_tokens": n,
            "seed": seq.seed,
            "params": {"temperature": 0.8, "seed": 77, "max_tokens": 24, "ignore_eos": True},
        }
        result = run_importer(IMPORTER, msg)
        assert result["tokens"] == expected
        assert result["recomputed"] == 0  # nothing prefilled again: the KV came across
        free_before = src.block_manager.num_free_blocks
        src.unpin_kv(pinned.blocks)
        assert src.block_manager.num_free_blocks == free_before + len(pinned.blocks)
    finally:
        shared.close()


def test_a_reused_block_makes_the_read_expired_not_wrong(llama_dir):
    ids = list(range(3, 40))
    shared = SharedKVPool()
    reader = PoolReader()
    try:
        src, _ = prefilled(llama_dir, shared, ids, num_kv_blocks=4)
        pinned = src.pin_kv("r")
        src.abort("r")
        shape = block_shape(src)
        bs = src.kv_cache.block_size
        with reader.read(shared.name, torch.float32, shape, pinned.blocks, pinned.generations):
            pass  # still theirs: reads fine
        src.unpin_kv(pinned.blocks)  # the lease ends; another prompt takes every block
        other = SamplingParams(temperature=0, max_tokens=1)
        src.add(Request("o", list(range(100, 100 + 4 * bs - 1)), other))
        while src.has_unfinished():
            src.step()
        with (
            pytest.raises(TransferExpiredError, match="reused"),
            reader.read(shared.name, torch.float32, shape, pinned.blocks, pinned.generations),
        ):
            pass
    finally:
        reader.close()
        shared.close()


def test_import_copies_exactly_the_named_blocks(llama_dir):
    shared = SharedKVPool()
    try:
        src, seq = prefilled(llama_dir, shared, list(range(3, 40)))
        pinned = src.pin_kv("r")
        dst = Engine(EngineConfig(model=str(llama_dir), dtype="float32", num_kv_blocks=64))
        dst.add(Request("x", list(range(50, 70)), PARAMS))  # so the tables differ
        dst.step()
        kv = KVBlocks(src.kv_cache.kv, pinned.blocks, pinned.num_tokens)
        export = KVExport("r", list(seq.token_ids), seq.num_prompt_tokens, kv, seq.seed)
        got = dst.import_kv(export, PARAMS)
        n = pinned.num_tokens
        assert torch.equal(dst.export_kv("r").kv, src.export_kv("r").kv[:, :, :, :n])
        assert got.num_computed_tokens == n
        with pytest.raises(Exception, match="blocks for"):  # a table that does not fit n
            bad = KVBlocks(src.kv_cache.kv, pinned.blocks[:-1], n)
            dst.import_kv(KVExport("s", list(seq.token_ids), seq.num_prompt_tokens, bad, 1), PARAMS)
    finally:
        shared.close()


def test_a_segment_that_is_gone_is_expired():
    reader = PoolReader()
    with (
        pytest.raises(TransferExpiredError, match="gone"),
        reader.read("sw0_pool_nonexistent", torch.float32, (1, 2, 1, 4, 8), [0], [1]),
    ):
        pass


def test_holds_maps_a_pool_here_and_looks_for_a_missing_one_once(monkeypatch):
    pool = SharedKVPool()
    pool.storage(4, 64, torch.float32)
    reader = PoolReader()
    try:
        assert reader.holds(pool.name, 4)
        assert not reader.holds(pool.name, 5)  # maps, but not a pool of that shape
        assert not reader.holds("sw0_pool_elsewhere", 4)
        looked: list[str] = []
        real_get = reader._attached.get
        monkeypatch.setattr(reader._attached, "get", lambda n: looked.append(n) or real_get(n))
        assert not reader.holds("sw0_pool_elsewhere", 4)  # on another host: no shm_open again
        assert reader.holds(pool.name, 4)
        assert looked == [pool.name]
    finally:
        reader.close()
        pool.close()


def test_pin_leases_are_bounded_and_released_on_ack_or_expiry():
    leases = PinLeases(max_blocks=5, lease_ms=1000)
    h1, exp1 = leases.add("seg", [1, 2, 3])
    assert leases.can_pin(2) and not leases.can_pin(3)
    h2, _ = leases.add("seg", [7, 8])
    assert h1 != h2 and leases.num_blocks == 5 and leases.num_live == 2
    assert leases.ack(h1) == [1, 2, 3] and leases.ack(h1) == []  # twice: nothing more
    assert leases.reap(at_ms=exp1 - 1) == []
    assert leases.reap(at_ms=exp1 + 2000) == [7, 8] and leases.num_expired == 1
    assert leases.num_blocks == 0 and leases.can_pin(5)
    leases.add("seg", [4])
    assert leases.release_all() == [4] and leases.num_live == 0
