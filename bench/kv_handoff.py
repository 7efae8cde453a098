"""KV handoff bandwidth: shared-memory handoffs vs a plain memcpy, Mooncake vs a TCP socket.

    python bench/kv_handoff.py [--model smollm2] [--tokens 512] [--dtype float32] [--repeats 20]

Two transports, both from a prefill engine whose pool lives in shared memory:
  * shm_pool (the default): pin the sequence's blocks, then the importer maps the pool and
    copies those blocks straight into another engine's pool (what the workers do; one copy).
    Measured twice: with the blocks in runs as a fresh pool hands them out, and scattered
    (every destination block apart from the next, so no two blocks copy together).
  * shm: gather the blocks into a leased buffer, then scatter the buffer into the other
    engine's pool (two copies).
Baseline = `dst.copy_(src)` of the same number of bytes between two preallocated tensors,
measured in the same run.

And across hosts, where the Mooncake engine imports (else skipped, said so): `mooncake`, what a
decode worker on another host does. A second process maps the prefill engine's pool segment and
serves it, with Mooncake's transfer engine (TCP) and with a plain TCP socket, on loopback; this
process reads the pinned blocks over Mooncake into its staging pool (generations read before
and after, as decode does; "+ import": then into the other engine's pool), and, as the
baseline, receives the same number of bytes (whole blocks) from the socket: one `sendall` of
that many bytes of the segment there, `recv_into` one preallocated buffer here.

The last line is one JSON object; `handoff_vs_memcpy` is shm_pool's scattered figure (the
conservative one), `mooncake_vs_socket` the ratio of Mooncake's bandwidth to the socket's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import textwrap
import time

import torch

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.models.resolve import resolve_model
from pipeline.transfer import mooncake
from pipeline.transfer.base import ExportPool
from pipeline.transfer.shm import ShmTransport
from pipeline.transfer.shm_pool import PoolReader, SharedKVPool, data_offset

# The serving process: maps the pool segment, serves it over Mooncake and over a TCP socket
# (a request is 16 bytes: offset, length; the reply is those bytes of the segment).
SERVER = textwrap.dedent(
    """
    import json, socket, struct, sys, torch
    from pipeline.transfer.mooncake import MooncakeServer
    from pipeline.transfer.shm import Attachments
    seg = Attachments().get(sys.argv[1])
    address = torch.frombuffer(seg.buf, dtype=torch.uint8).data_ptr()
    server = MooncakeServer("127.0.0.1")
    server.serve(address, seg.size)
    listener = socket.create_server(("127.0.0.1", 0))
    print(json.dumps({"session": server.session, "addr": address,
                      "port": listener.getsockname()[1]}), flush=True)
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while len(req := conn.recv(16, socket.MSG_WAITALL)) == 16:
        offset, length = struct.unpack("<qq", req)
        conn.sendall(seg.buf[offset : offset + length])
    """
)


def timed(fn, repeats: int) -> float:
    """Median seconds of `fn()` over `repeats` runs (after one warm-up)."""
    fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def across_hosts(src: Engine, dst: Engine, shared: SharedKVPool, repeats: int) -> dict | None:
    """Seconds of a Mooncake read of the pinned blocks, of that read + import, and of a socket
    copy of as many bytes, all over loopback from a serving process; None without Mooncake."""
    if not mooncake.available():
        return None
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, shared.name],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the engine logs every connection
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    pinned = src.pin_kv("h")
    reader = mooncake.MooncakeReader("127.0.0.1", timeout_ms=60_000)
    try:
        assert server.stdout is not None
        hello = json.loads(server.stdout.readline())
        layers, two, kvh, num_blocks, bs, d = src.kv_cache.kv.shape
        block_shape = (layers, two, kvh, bs, d)
        nb = len(pinned.blocks)
        staged = list(range(nb))

        def read():
            return reader.read(
                hello["session"], hello["addr"], num_blocks, src.dtype, block_shape,
                pinned.blocks, pinned.generations,
            )  # fmt: skip

        def read_import():
            dst.kv_cache.import_blocks(staged, read(), staged)

        nbytes = nb * src.kv_cache.bytes_per_block(layers, bs, kvh, d, src.dtype)
        sock = socket.create_connection(("127.0.0.1", hello["port"]))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        into = memoryview(bytearray(nbytes))
        request = struct.pack("<qq", data_offset(num_blocks), nbytes)  # from the pool's start

        def socket_copy():
            sock.sendall(request)
            got = 0
            while got < nbytes:
                got += sock.recv_into(into[got:], nbytes - got)

        out = {
            "bytes": nbytes,
            "socket_s": timed(socket_copy, repeats),
            "mooncake_s": timed(read, repeats),
            "mooncake_import_s": timed(read_import, repeats),
        }
        sock.close()
        return out
    finally:
        reader.close()
        src.unpin_kv(pinned.blocks)
        server.kill()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    path = str(resolve_model(args.model))
    # CPU engines on a GPU machine too: these transports are host shared memory (a CUDA
    # engine's pool cannot live there; on a GPU the handoff is cuda_ipc, measured in the stack).
    cfg = EngineConfig(model=path, dtype=args.dtype, kv_cache_memory_gb=0.5, device="cpu")
    shared = SharedKVPool()
    src, dst = Engine(cfg, shared.storage), Engine(cfg)
    vocab = src.model_config.vocab_size  # the tiny reasoner has 100 tokens, SmolLM2 49152
    tokens = min(args.tokens, src.max_model_len - 2)  # the tiny reasoner's context is 512
    ids = [(100 + i * 7919) % vocab for i in range(tokens)]
    seq = src.add(Request("h", ids, SamplingParams(temperature=0, max_tokens=2)))
    while seq.num_output_tokens < 1:
        src.step()
    n = seq.num_computed_tokens
    shape = src.export_shape("h")
    pool = ExportPool(ShmTransport(), "bench", max_bytes=1 << 31)
    transport = ShmTransport()
    # The importer's blocks: allocate once, as import_kv would.
    nb = dst.block_manager.num_blocks_for(n)
    dst_blocks = list(range(nb))
    scattered = list(range(0, 2 * nb, 2))  # no two consecutive: one copy per block
    reader = PoolReader()
    layers, two, kvh, _, bs, d = src.kv_cache.kv.shape

    def pooled(blocks: list[int]):
        def run():
            pinned = src.pin_kv("h")
            with reader.read(
                shared.name, src.dtype, (layers, two, kvh, bs, d), pinned.blocks, pinned.generations
            ) as pool:
                dst.kv_cache.import_blocks(blocks, pool, pinned.blocks)
            src.unpin_kv(pinned.blocks)

        return run

    def export():
        handle, buf = pool.export(shape, src.dtype)
        src.export_kv("h", out=buf)
        return handle

    def handoff():
        handle = export()
        with transport.attach(handle) as kv:
            dst.kv_cache.import_(dst_blocks, kv[:, :, :, :n])
        pool.ack(handle.handle)

    def export_only():
        pool.ack(export().handle)

    nbytes = src.dtype.itemsize * n
    for s in shape[:3] + shape[4:]:
        nbytes *= s
    a = torch.empty(nbytes // src.dtype.itemsize, dtype=src.dtype)
    b = torch.empty_like(a)
    a.fill_(1.0)
    memcpy_s = timed(lambda: b.copy_(a), args.repeats)
    handoff_s = timed(handoff, args.repeats)
    export_s = timed(export_only, args.repeats)
    pooled_s = timed(pooled(dst_blocks), args.repeats)
    scattered_s = timed(pooled(scattered), args.repeats)
    remote = across_hosts(src, dst, shared, args.repeats)
    pool.close()
    reader.close()
    shared.close()

    gbps = lambda s: nbytes / s / 1e9  # noqa: E731
    ratio = memcpy_s / scattered_s
    load = os.getloadavg()[0]
    print(f"KV of {n} tokens, {args.dtype}: {nbytes / 1e6:.1f} MB  (load avg {load:.2f})")
    rows = [
        ("memcpy (baseline)", memcpy_s),
        ("shm_pool, blocks in runs", pooled_s),
        ("shm_pool, scattered", scattered_s),
        ("shm export only", export_s),
        ("shm export + import", handoff_s),
    ]
    for name, sec in rows:
        print(f"{name:<28}{sec * 1e3:9.2f} ms {gbps(sec):8.2f} GB/s  {memcpy_s / sec:5.2f}x memcpy")
    print(f"handoff (shm_pool, scattered) / memcpy bandwidth: {ratio:.2f}")
    figures: dict[str, float | None] = dict.fromkeys(
        ("socket_gbps", "mooncake_gbps", "mooncake_import_gbps", "mooncake_vs_socket")
    )
    if remote is None:
        print("mooncake: skipped (the engine does not import here: scripts/setup.sh)")
    else:
        rb, sock_s = remote["bytes"], remote["socket_s"]
        rgbps = lambda s: rb / s / 1e9  # noqa: E731
        print(f"across processes on loopback, {rb / 1e6:.1f} MB (whole blocks):")
        for name, sec in (
            ("socket copy (baseline)", sock_s),
            ("mooncake read", remote["mooncake_s"]),
            ("mooncake read + import", remote["mooncake_import_s"]),
        ):
            print(
                f"{name:<28}{sec * 1e3:9.2f} ms {rgbps(sec):8.2f} GB/s  {sock_s / sec:5.2f}x socket"
            )
        print(f"mooncake / socket bandwidth: {sock_s / remote['mooncake_s']:.2f}")
        figures = {
            "socket_gbps": round(rgbps(sock_s), 3),
            "mooncake_gbps": round(rgbps(remote["mooncake_s"]), 3),
            "mooncake_import_gbps": round(rgbps(remote["mooncake_import_s"]), 3),
            "mooncake_vs_socket": round(sock_s / remote["mooncake_s"], 3),
        }
    print(
        json.dumps(
            {
                "bench": "kv_handoff",
                "tokens": n,
                "bytes": nbytes,
                "dtype": args.dtype,
                "memcpy_gbps": round(gbps(memcpy_s), 3),
                "export_gbps": round(gbps(export_s), 3),
                "shm_copy_gbps": round(gbps(handoff_s), 3),
                "shm_copy_vs_memcpy": round(memcpy_s / handoff_s, 3),
                "shm_pool_runs_vs_memcpy": round(memcpy_s / pooled_s, 3),
                "handoff_gbps": round(gbps(scattered_s), 3),
                "handoff_vs_memcpy": round(ratio, 3),
                **figures,
                "load_avg": round(load, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
