"""KV handoff bandwidth: shared-memory handoffs vs a plain memcpy of the same bytes.

    python bench/kv_handoff.py [--model smollm2] [--tokens 512] [--dtype float32] [--repeats 20]

Two transports, both from a prefill engine whose pool lives in shared memory:
  * shm_pool (the default): pin the sequence's blocks, then the importer maps the pool and
    copies those blocks straight into another engine's pool (what the workers do; one copy).
    Measured twice: with the blocks in runs as a fresh pool hands them out, and scattered
    (every destination block apart from the next, so no two blocks copy together).
  * shm: gather the blocks into a leased buffer, then scatter the buffer into the other
    engine's pool (two copies).
Baseline = `dst.copy_(src)` of the same number of bytes between two preallocated tensors,
measured in the same run. The last line is one JSON object; `handoff_vs_memcpy` is shm_pool's
scattered figure (the conservative one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.engine.prepare import resolve_model
from pipeline.transfer.base import ExportPool
from pipeline.transfer.shm import ShmTransport
from pipeline.transfer.shm_pool import PoolReader, SharedKVPool


def timed(fn, repeats: int) -> float:
    """Median seconds of `fn()` over `repeats` runs (after one warm-up)."""
    fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


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
    cfg = EngineConfig(model=path, dtype=args.dtype, kv_cache_memory_gb=0.5)
    shared = SharedKVPool()
    src, dst = Engine(cfg, shared.storage), Engine(cfg)
    ids = [100 + (i * 7919) % 30000 for i in range(args.tokens)]
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
                "load_avg": round(load, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
