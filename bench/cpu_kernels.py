"""The C kernels per instruction set, side by side: AVX-512, AVX2 + FMA and the portable loops.

    python bench/cpu_kernels.py [--runs 5] [--batch 32] [--context 1024] [--json-out FILE]

A kernel is compiled at first use with -march=native, so the host's flags choose its code
(pipeline/kernels/cpu_build.py); here each instruction set a host might have is built on this
one (STEPWISE_KERNELS_CFLAGS: `-mno-avx512f` for AVX2; `-DSTEPWISE_PORTABLE` too for the
portable loops gcc vectorizes for AVX2, which AVX2 hosts ran before their hand-written paths;
`-mno-avx2 -mno-fma` too for no vector ISA at all; a set this CPU lacks is skipped) and timed in
a process of its own, the builds interleaved run by run, beside the torch reference on the same
inputs. Cases: paged decode attention at SmolLM2's shapes (9 heads, 3 KV heads, head_dim 64) and
at a Qwen2.5-style head (head_dim 128, 12 / 2 heads), fp32 and bf16; logits statistics and
sampling at T 0.7 (sample_cpu.c against the sampler's softmax, cumsum and search) over SmolLM2's
vocabulary. Printed: the median time of each (ms, spread over runs) and each build's
speed over the AVX2 loops' (`avx2-loops`) and over torch's. The last line printed is one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from bench.engine_throughput import emit, git_commit  # noqa: E402
from pipeline.kernels.cpu_build import cpu_flags  # noqa: E402

# Build name -> extra C flags, and the CPU flag it needs (on top of the previous one's).
# "avx2-loops" is what an AVX2 host ran before the AVX2 paths: the portable loops, vectorized
# by gcc for AVX2 (STEPWISE_PORTABLE leaves out the hand-written paths); the AVX2 paths' speed is
# measured over it.
BUILDS = {
    "avx512": ("", "avx512f"),
    "avx2": ("-mno-avx512f", "avx2"),
    "avx2-loops": ("-mno-avx512f -DSTEPWISE_PORTABLE", "avx2"),
    "portable": ("-mno-avx512f -mno-avx2 -mno-fma", ""),
}
BASE = "avx2-loops"
# (name, heads, kv_heads, head_dim, dtype)
ATTENTION = [
    ("attention smollm2 fp32", 9, 3, 64, "float32"),
    ("attention smollm2 bf16", 9, 3, 64, "bfloat16"),
    ("attention d128 fp32", 12, 2, 128, "float32"),
    ("attention d128 bf16", 12, 2, 128, "bfloat16"),
]
VOCAB = 49152


def builds_here() -> list[str]:
    flags = cpu_flags()
    return [name for name, (_, need) in BUILDS.items() if not need or need in flags]


def median_ms(fn, reps: int) -> float:
    fn()  # warm: first call builds and loads the library
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def child(batch: int, context: int, reps: int, with_torch: bool) -> dict[str, float]:
    """Times every case with the build STEPWISE_KERNELS_CFLAGS selects (this process's)."""
    import torch

    from pipeline.kernels.logits_stats import logits_stats_torch
    from pipeline.kernels.logits_stats_cpu import logits_stats_cpu
    from pipeline.kernels.paged_attention import paged_decode_attention_torch
    from pipeline.kernels.paged_attention_cpu import paged_decode_attention_cpu
    from pipeline.kernels.sample import sample_torch
    from pipeline.kernels.sample_cpu import sample_cpu

    g = torch.Generator().manual_seed(0)
    bs, out = 16, {}
    for name, heads, kv_heads, d, dt in ATTENTION:
        dtype = getattr(torch, dt)
        per_seq = -(-context // bs)
        k = torch.randn(kv_heads, batch * per_seq, bs, d, generator=g).to(dtype)
        v = torch.randn(kv_heads, batch * per_seq, bs, d, generator=g).to(dtype)
        q = torch.randn(batch, heads, d, generator=g).to(dtype)
        tables = torch.randperm(batch * per_seq, generator=g).view(batch, per_seq)
        ctx = torch.full((batch,), context, dtype=torch.int64)
        args = (q, k, v, tables, ctx, d**-0.5)
        out[name] = median_ms(lambda a=args: paged_decode_attention_cpu(*a), reps)
        if with_torch:
            out[f"{name} torch"] = median_ms(lambda a=args: paged_decode_attention_torch(*a), reps)
    logits = torch.randn(batch, VOCAB, generator=g) * 4
    out["logits_stats"] = median_ms(lambda: logits_stats_cpu(logits), reps)
    if with_torch:
        out["logits_stats torch"] = median_ms(lambda: logits_stats_torch(logits), reps)
    temps, u = torch.full((batch,), 0.7), torch.rand(batch, generator=g)
    out["sample"] = median_ms(lambda: sample_cpu(logits, temps, u), reps)
    if with_torch:
        out["sample torch"] = median_ms(lambda: sample_torch(logits, temps, u), reps)
    return out


def run_build(name: str, args, cache: Path) -> dict[str, float]:
    env = dict(os.environ, STEPWISE_KERNELS_CFLAGS=BUILDS[name][0])
    env["STEPWISE_KERNELS_DIR"] = str(cache / name)
    cmd = [sys.executable, __file__, "--child", "--batch", str(args.batch), "--context",
           str(args.context), "--reps", str(args.reps), "--threads", str(args.threads)]  # fmt: skip
    if name == "portable":
        cmd.append("--with-torch")  # once per run: torch's own code does not change by build
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} build's run failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict[str, dict[str, float]]], builds: list[str], base: str) -> dict:
    """Medians per (case, build) over runs, with spreads and speed ratios."""
    cases = [c for c in runs[0][builds[0]] if not c.endswith(" torch")]
    table = {}
    for case in cases:
        row = {}
        for b in builds:
            times = [r[b][case] for r in runs]
            row[b] = {"ms": statistics.median(times), "min": min(times), "max": max(times)}
        torch_ms = statistics.median(r["portable"][f"{case} torch"] for r in runs)
        row["torch"] = {"ms": torch_ms}
        for b in builds:
            row[b]["x_loops"] = row[base]["ms"] / row[b]["ms"]
            row[b]["x_torch"] = torch_ms / row[b]["ms"]
        table[case] = row
    return table


def print_table(table: dict, builds: list[str], base: str) -> None:
    head = f"{'case':24s}" + "".join(f"{b + ' ms':>21s}" for b in builds) + f"{'torch ms':>10s}"
    print(head + "  " + "".join(f"{b + ' x':>12s}" for b in builds if b != base))
    for case, row in table.items():
        cells = "".join(
            f"{row[b]['ms']:9.3f} ({row[b]['min']:.2f}-{row[b]['max']:.2f})" for b in builds
        )
        ratios = "".join(f"{row[b]['x_loops']:11.2f}x" for b in builds if b != base)
        print(f"{case:24s}{cells}{row['torch']['ms']:10.3f}  {ratios}")
    print(f"(x: speed over {base}, the same ms ratio; torch: its reference on the same inputs)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=30, help="calls timed per case per run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--with-torch", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(child(args.batch, args.context, args.reps, args.with_torch)))
        return 0
    builds = builds_here()
    print(f"builds on this CPU: {', '.join(builds)}; {args.runs} runs, interleaved")
    runs = []
    with tempfile.TemporaryDirectory(prefix="stepwise-kernels-") as tmp:
        for i in range(args.runs):
            runs.append({b: run_build(b, args, Path(tmp)) for b in builds})
            print(f"run {i + 1}/{args.runs} done", flush=True)
    base = BASE if BASE in builds else "portable"
    table = summarize(runs, builds, base)
    print_table(table, builds, base)
    emit(
        {"bench": "cpu_kernels", "commit": git_commit(), "builds": builds, "runs": args.runs,
         "batch": args.batch, "context": args.context, "threads": args.threads, "base": base,
         "cases": table},
        args.json_out,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
