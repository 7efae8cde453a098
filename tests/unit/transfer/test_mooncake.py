"""The mooncake transport on Mooncake's real transfer engine, TCP on loopback, two processes:
an exporter process serves a pool segment, this process reads pinned blocks out of it
(skipped without the engine unless STEPWISE_TEST_MOONCAKE=1: mooncake_check.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from multiprocessing import resource_tracker, shared_memory

import pytest
import torch

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.transfer import TransferExpiredError
from pipeline.transfer.mooncake import MooncakeReader, MooncakeServer, TransferTimeoutError
from pipeline.transfer.shm_pool import HEADER, SharedKVPool, data_offset
from tests.unit.transfer.importer import REPORT, run_importer
from tests.unit.transfer.mooncake_check import mooncake_or_skip


@pytest.fixture(autouse=True)
def needs_mooncake() -> None:
    mooncake_or_skip()


BLOCK = (2, 2, 2, 16, 8)  # layers, K/V, kv_heads, block_size, head_dim: 512 B per plane block
NUM_BLOCKS = 32

EXPORTER = textwrap.dedent(
    f"""
    import json, sys, torch
    from pipeline.transfer.mooncake import MooncakeServer
    from pipeline.transfer.shm_pool import SharedKVPool
    shared = SharedKVPool()
    kv, gens = shared.storage({NUM_BLOCKS}, {NUM_BLOCKS * 2 * 2 * 2 * 16 * 8}, torch.float32)
    kv.copy_(torch.randn(kv.numel(), generator=torch.Generator().manual_seed(3)))
    for b in range({NUM_BLOCKS}):
        gens[b] = 7
    server = MooncakeServer("127.0.0.1")
    server.serve(shared.address, shared.segment.size)
    print(json.dumps({{"session": server.session, "addr": shared.address,
                      "name": shared.name}}), flush=True)
    sys.stdin.read()  # serve until the test closes our stdin
    """
)


@pytest.fixture
def exporter():
    """A process serving a pool segment over Mooncake: (process, its hello, the segment
    mapped here for checking and for reusing blocks)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", EXPORTER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the engine logs every connection
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.stdout is not None
    hello = json.loads(proc.stdout.readline())
    seg = shared_memory.SharedMemory(name=hello["name"])
    resource_tracker.unregister(seg._name, "shared_memory")  # type: ignore[attr-defined]
    try:
        yield proc, hello, seg
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        seg.close()


def expected_blocks(seg, blocks: list[int]) -> torch.Tensor:
    """`blocks` as the exporter's segment holds them (read in place, here)."""
    layers, two, kvh, bs, d = BLOCK
    n = layers * two * kvh * NUM_BLOCKS * bs * d
    pool = torch.frombuffer(seg.buf, dtype=torch.float32, count=n, offset=data_offset(NUM_BLOCKS))
    out = pool.view(layers, two, kvh, NUM_BLOCKS, bs, d)[:, :, :, blocks].clone()
    del pool
    return out


def read(reader: MooncakeReader, hello: dict, blocks: list[int], gen: int = 7) -> torch.Tensor:
    return reader.read(
        hello["session"], hello["addr"], NUM_BLOCKS, torch.float32, BLOCK, blocks,
        [gen] * len(blocks),
    )  # fmt: skip


def test_pinned_blocks_come_across_byte_for_byte(exporter):
    _, hello, seg = exporter
    reader = MooncakeReader("127.0.0.1", timeout_ms=3000)
    blocks = [5, 6, 7, 20, 1, 2, 31]
    got = read(reader, hello, blocks)[:, :, :, : len(blocks)]
    assert torch.equal(got, expected_blocks(seg, blocks))
    again = [0, 9]  # the session is kept: the next read is one round trip
    assert torch.equal(read(reader, hello, again)[:, :, :, :2], expected_blocks(seg, again))
    reader.close()


def test_a_reused_block_is_expired(exporter):
    _, hello, seg = exporter
    reader = MooncakeReader("127.0.0.1", timeout_ms=3000)
    read(reader, hello, [3, 4])
    gens = seg.buf[HEADER : HEADER + 8 * NUM_BLOCKS].cast("q")
    gens[4] += 1  # the exporter took block 4 for new content
    del gens
    with pytest.raises(TransferExpiredError, match="reused"):
        read(reader, hello, [3, 4])
    reader.close()


def test_a_killed_exporter_fails_the_read_within_its_deadline(exporter):
    proc, hello, _ = exporter
    reader = MooncakeReader("127.0.0.1", timeout_ms=2000)
    read(reader, hello, [1])
    proc.kill()
    proc.wait(10)
    t = time.monotonic()
    with pytest.raises(TransferExpiredError):
        read(reader, hello, [1, 2])
    assert time.monotonic() - t < 2.5


def stop(pid: int) -> None:
    """SIGSTOP `pid` and wait until every one of its threads is stopped: kill() returns before
    a thread busy in a syscall stops, and a CI run saw a read served in that window."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:  # a thread that ended meanwhile
                continue
        if states and all(s in "Tt" for s in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop within 5 s: thread states {states}")


def test_a_stopped_exporter_times_out_and_never_stalls_the_reader(exporter):
    proc, hello, _ = exporter
    reader = MooncakeReader("127.0.0.1", timeout_ms=500)
    read(reader, hello, [1])
    stop(proc.pid)  # alive, connected, silent
    t = time.monotonic()
    with pytest.raises(TransferTimeoutError, match="deadline"):
        read(reader, hello, [1, 2])
    assert time.monotonic() - t < 1.0
    with pytest.raises(TransferTimeoutError, match="still on"):  # fail at once, unread
        read(reader, hello, [3])


PARAMS = SamplingParams(temperature=0.8, seed=77, max_tokens=24, ignore_eos=True)

IMPORTER = (
    textwrap.dedent(
        """
    import json, sys, torch
    from pipeline.engine import Engine, EngineConfig, KVBlocks, KVExport, SamplingParams
    from pipeline.transfer.mooncake import MooncakeReader
    msg = json.loads(sys.stdin.read())
    engine = Engine(EngineConfig(model=msg["model"], dtype="float32", num_kv_blocks=64))
    reader = MooncakeReader("127.0.0.1", timeout_ms=5000)
    pool = reader.read(msg["session"], msg["addr"], msg["pool_blocks"], torch.float32,
                       tuple(msg["block_shape"]), msg["blocks"], msg["gens"])
    kv = KVBlocks(pool, list(range(len(msg["blocks"]))), msg["num_kv_tokens"])
    export = KVExport("r", msg["token_ids"], msg["num_prompt_tokens"], kv, msg["seed"])
    seq = engine.import_kv(export, SamplingParams(**msg["params"]))
    """
    )
    + REPORT
)


def test_a_prefilled_sequence_decodes_on_over_mooncake_exactly(llama_dir):
    """A real engine's pinned blocks, read by another process's engine over Mooncake: the
    decoding goes on as if one engine did it all, nothing prefilled again."""
    ids = torch.randint(0, 320, (37,), generator=torch.Generator().manual_seed(5)).tolist()
    config = EngineConfig(model=str(llama_dir), dtype="float32", num_kv_blocks=64)
    expected = Engine(config).generate([ids], PARAMS)[0].token_ids
    shared = SharedKVPool()
    src = Engine(config, shared.storage)
    server = MooncakeServer("127.0.0.1")
    assert shared.segment is not None
    server.serve(shared.address, shared.segment.size)
    try:
        seq = src.add(Request("r", ids, PARAMS))
        while seq.num_output_tokens < 1:
            src.step()
        pinned = src.pin_kv("r")
        src.abort("r")
        layers, two, kvh, _, bs, d = src.kv_cache.kv.shape
        msg = {
            "model": str(llama_dir), "session": server.session, "addr": shared.address,
            "pool_blocks": 64, "block_shape": [layers, two, kvh, bs, d],
            "blocks": pinned.blocks, "gens": pinned.generations,
            "token_ids": list(seq.token_ids), "num_prompt_tokens": len(ids),
            "num_kv_tokens": pinned.num_tokens, "seed": seq.seed,
            "params": {"temperature": 0.8, "seed": 77, "max_tokens": 24, "ignore_eos": True},
        }  # fmt: skip
        result = run_importer(IMPORTER, msg)
        assert result["tokens"] == expected and result["recomputed"] == 0
    finally:
        server.close()
        shared.close()
