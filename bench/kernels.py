"""Kernel bandwidth: each Triton kernel's achieved memory bandwidth vs a device-to-device copy.

    python bench/kernels.py [--batch 64] [--context 4096] [--dtype bfloat16] [--json-out FILE]

For every kernel: bytes it must move (read + write, at least once) over its median time,
against `dst.copy_(src)` bandwidth (read + write) measured in the same run, plus the torch
reference's time for the same call. Shapes default to the issue's configuration: paged
decode attention at batch 64, context 4k, Qwen2.5-1.5B attention (12 heads, 2 KV heads,
head_dim 128, 28 layers, vocab 151936), block size 16. Target (issue 9): paged decode
attention >= 70% of copy bandwidth. Needs a CUDA GPU; without one it says so and only runs
the torch references at a small size as a smoke check (no bandwidth figures). The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from bench.engine_throughput import emit, git_commit  # noqa: E402
from pipeline.kernels.kv_store import store_kv_torch  # noqa: E402
from pipeline.kernels.kv_transfer import export_blocks_torch, import_blocks_torch  # noqa: E402
from pipeline.kernels.logits_stats import logits_stats_torch  # noqa: E402
from pipeline.kernels.paged_attention import paged_decode_attention_torch  # noqa: E402

TARGET_ATTENTION = 0.70


@dataclass(frozen=True, slots=True)
class Shapes:
    batch: int = 64
    context: int = 4096
    heads: int = 12
    kv_heads: int = 2
    head_dim: int = 128
    layers: int = 28
    vocab: int = 151936
    block_size: int = 16
    store_tokens: int = 8192  # a prefill chunk: the KV store only nears bandwidth in bulk
    export_tokens: int = 4096  # one sequence's handoff


@dataclass(slots=True)
class Case:
    name: str
    bytes: int
    triton: object  # () -> None
    reference: object  # () -> None
    note: str


def cases(s: Shapes, dtype: torch.dtype, device: torch.device, triton_mods: dict | None):
    """The kernel calls at the bench shapes; triton_mods None: references only (smoke)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    isz = torch.tensor([], dtype=dtype).element_size()

    def randn(*shape, dt=dtype):
        return torch.randn(*shape, generator=g).to(dt).to(device)

    out = []
    # Paged decode attention: every sequence reads its whole context's K and V once.
    nb = s.batch * s.context // s.block_size
    k_cache, v_cache = (randn(s.kv_heads, nb, s.block_size, s.head_dim) for _ in range(2))
    tables = torch.randperm(nb, generator=g).view(s.batch, -1).to(device)
    ctx = torch.full((s.batch,), s.context, device=device)
    q = randn(s.batch, s.heads, s.head_dim)
    scale, ws = s.head_dim**-0.5, {}
    args = (q, k_cache, v_cache, tables, ctx, scale)
    attn_bytes = 2 * s.batch * s.context * s.kv_heads * s.head_dim * isz
    attn_bytes += 2 * q.numel() * isz + tables.numel() * 8
    # partial, not a lambda: a lambda would read `tri` when called, after it names the next
    # case's kernel (every case would time the last kernel).
    tri = triton_mods and triton_mods["paged_attention"].paged_decode_attention_triton
    out.append(
        Case(
            "paged_decode_attention",
            attn_bytes,
            partial(tri, *args, ws) if tri else None,
            lambda: paged_decode_attention_torch(*args, {}),
            f"batch {s.batch}, context {s.context}, {s.heads}/{s.kv_heads} heads, "
            f"head_dim {s.head_dim}, block {s.block_size}",
        )
    )
    # KV store: read the new K/V, write them into scattered slots.
    t = s.store_tokens
    kn, vn = randn(t, s.kv_heads, s.head_dim), randn(t, s.kv_heads, s.head_dim)
    slots = torch.randperm(nb * s.block_size, generator=g)[:t].to(device)
    store_args = (k_cache, v_cache, kn, vn, slots)
    tri = triton_mods and triton_mods["kv_store"].store_kv_triton
    out.append(
        Case(
            "store_kv",
            2 * 2 * kn.numel() * isz + slots.numel() * 8,
            partial(tri, *store_args) if tri else None,
            lambda: store_kv_torch(*store_args),
            f"{t} tokens into random slots",
        )
    )
    # Logits statistics: one read of [batch, vocab] fp32 logits.
    logits = randn(s.batch, s.vocab, dt=torch.float32)
    tri = triton_mods and triton_mods["logits_stats"].logits_stats_triton
    out.append(
        Case(
            "logits_stats",
            logits.numel() * 4,
            partial(tri, logits) if tri else None,
            lambda: logits_stats_torch(logits),
            f"[{s.batch}, {s.vocab}] fp32",
        )
    )
    # KV export/import: one sequence's blocks, every layer, to/from the handoff layout.
    nbe = -(-s.export_tokens // s.block_size)
    pool_blocks = 2 * nbe
    pool = randn(s.layers, 2, s.kv_heads, pool_blocks, s.block_size, s.head_dim)
    blocks = torch.randperm(pool_blocks, generator=g)[:nbe].to(device)
    buf = torch.empty(s.layers, 2, s.kv_heads, nbe * s.block_size, s.head_dim, dtype=dtype)
    buf = buf.to(device)
    xfer_bytes = 2 * buf.numel() * isz + blocks.numel() * 8
    mod = triton_mods and triton_mods["kv_transfer"]
    note = f"{s.export_tokens} tokens x {s.layers} layers"
    out.append(
        Case(
            "export_blocks",
            xfer_bytes,
            partial(mod.export_blocks_triton, pool, blocks, buf) if mod else None,
            lambda: export_blocks_torch(pool, blocks, buf),
            note,
        )
    )
    out.append(
        Case(
            "import_blocks",
            xfer_bytes,
            partial(mod.import_blocks_triton, pool, blocks, buf) if mod else None,
            lambda: import_blocks_torch(pool, blocks, buf),
            note,
        )
    )
    return out


def cuda_time(fn) -> float:
    """Median seconds per call, L2 flushed between calls (triton.testing.do_bench)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") / 1e3


def copy_bandwidth(device: torch.device, nbytes: int = 1 << 30) -> float:
    """Bytes/s of dst.copy_(src) on the device, counting read + write."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / cuda_time(lambda: dst.copy_(src))


def smoke(shapes: Shapes, dtype: torch.dtype) -> dict:
    """CPU, no GPU: run each torch reference once at a small size; wall times, no bandwidth."""
    small = Shapes(batch=4, context=256, layers=2, vocab=4096, store_tokens=64, export_tokens=256)
    times = {}
    for case in cases(small, dtype, torch.device("cpu"), None):
        t0 = time.perf_counter()
        case.reference()
        times[case.name] = time.perf_counter() - t0
        print(f"  {case.name:<24} reference ran ({case.note}) in {times[case.name] * 1e3:.1f} ms")
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = Shapes()
    for field in ("batch", "context", "heads", "kv_heads", "head_dim", "layers", "vocab"):
        ap.add_argument(f"--{field.replace('_', '-')}", type=int, default=getattr(d, field))
    ap.add_argument("--block-size", type=int, default=d.block_size)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)
    shapes = Shapes(
        batch=args.batch,
        context=args.context,
        heads=args.heads,
        kv_heads=args.kv_heads,
        head_dim=args.head_dim,
        layers=args.layers,
        vocab=args.vocab,
        block_size=args.block_size,
    )
    dtype = getattr(torch, args.dtype)
    summary: dict = {"bench": "kernels", "commit": git_commit(), "dtype": args.dtype}
    if not torch.cuda.is_available():
        print(
            "No CUDA GPU present: kernel bandwidth figures need one (run scripts/gpu_check.sh "
            "on a GPU machine). Smoke check only: the torch references at a small size on CPU; "
            "these are not GPU figures."
        )
        summary.update(gpu=None, smoke=True, reference_cpu_s=smoke(shapes, dtype))
        line = json.dumps(summary)
        if args.json_out:
            args.json_out.write_text(line + "\n")
        print(line)
        return 0

    from pipeline.kernels import dispatch

    device = torch.device("cuda")
    mods = {
        name: dispatch.triton_module(name)
        for name in ("paged_attention", "kv_store", "logits_stats", "kv_transfer")
    }
    gpu = torch.cuda.get_device_name(device)
    copy_bw = copy_bandwidth(device)
    print(f"GPU {gpu}; commit {summary['commit']}; dtype {args.dtype}")
    print(f"device-to-device copy: {copy_bw / 1e9:.0f} GB/s (read + write)")
    print(f"{'kernel':<24} {'MB moved':>9} {'us':>9} {'GB/s':>7} {'of copy':>8} {'torch us':>9}")
    figures = {}
    for case in cases(shapes, dtype, device, mods):
        t_tri = cuda_time(case.triton)
        t_ref = cuda_time(case.reference)
        bw = case.bytes / t_tri
        figures[case.name] = {
            "bytes": case.bytes,
            "triton_s": t_tri,
            "torch_s": t_ref,
            "gbps": bw / 1e9,
            "ratio_copy": bw / copy_bw,
            "speedup_vs_torch": t_ref / t_tri,
            "shape": case.note,
        }
        print(
            f"{case.name:<24} {case.bytes / 1e6:>9.1f} {t_tri * 1e6:>9.1f} {bw / 1e9:>7.0f} "
            f"{100 * bw / copy_bw:>7.0f}% {t_ref * 1e6:>9.1f}  ({case.note})"
        )
    ratio = figures["paged_decode_attention"]["ratio_copy"]
    verdict = "meets" if ratio >= TARGET_ATTENTION else "misses"
    print(
        f"paged decode attention at {100 * ratio:.0f}% of copy bandwidth: {verdict} the 70% target"
    )
    summary.update(
        gpu=gpu,
        copy_gbps=copy_bw / 1e9,
        kernels=figures,
        ratio=ratio,
        target=TARGET_ATTENTION,
        shapes=asdict(shapes),
    )
    emit(summary, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
