"""bf16 linear: the C kernel against F.linear, oneDNN bf16 where it packs, and fp32 oneDNN.

    python bench/linear_bf16.py [--runs 5] [--threads 2] [--rows 1,8,32]

SmolLM2's projection shapes (fused QKV, gate+up, down, lm_head) at decode batch sizes, one
process, the sides interleaved run by run: `c-bf16` (linear_bf16_cpu, what the engine runs
where the kernel applies), `F.linear bf16`, `oneDNN bf16` with a prepacked weight where oneDNN
packs bf16 (what the engine runs where the kernel does not) and, for scale, oneDNN fp32 (the
fp32 path before the fp32 C kernel). Prints medians (min-max) of the runs in us per call and
the kernel's speed over each other side.

The kernel goes before oneDNN where it builds with AVX-512 BF16 (vdpbf16ps); on an AVX-512
host without it, oneDNN packs bf16 and the kernel is not used. To see an AVX2-only host's
sides, emulate one: STEPWISE_KERNELS_CFLAGS=-mno-avx512f (the kernel's AVX2 build),
ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN as there: no bf16 packing) and ATEN_CPU_CAPABILITY=avx2
(torch's own loops as there). The script says which loop the kernel has and whether the
engine would use it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

SHAPES = {  # name: (out, in), SmolLM2-135M
    "qkv": (960, 576),
    "gate_up": (3072, 576),
    "down": (576, 1536),
    "lm_head": (49152, 576),
}


def timed(fn, min_s: float = 0.05) -> float:
    """Seconds per call: the best of three batches of calls of at least min_s each."""
    fn()
    reps, best = 1, float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
        reps = max(1, min(500, int(min_s / max(best, 1e-7))))
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,8,32")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from pipeline.kernels import linear_bf16_cpu
    from pipeline.kernels.cpu_linear import BATCH_HINT, bf16_kernel_applies, supports

    torch.set_num_threads(args.threads)
    emulated = {k: os.environ[k] for k in ("STEPWISE_KERNELS_CFLAGS", "ONEDNN_MAX_CPU_ISA",
                                          "ATEN_CPU_CAPABILITY") if k in os.environ}  # fmt: skip
    print(
        f"threads {args.threads}; oneDNN packs bf16: {supports(torch.bfloat16)}; kernel loop: "
        f"{linear_bf16_cpu.KERNEL.simd()} (0 portable, 1 AVX2, 2 NEON, 3 AVX-512 BF16); "
        f"the engine uses the kernel: "
        f"{bf16_kernel_applies()}; emulation: {emulated or 'none'}"
    )
    ops = torch.ops.mkldnn
    gen = torch.Generator().manual_seed(0)
    rows = [int(r) for r in args.rows.split(",")]
    cases = []
    for name, (n, k) in SHAPES.items():
        w = torch.randn(n, k, generator=gen).to(torch.bfloat16)
        packed = linear_bf16_cpu.pack(w)
        wf = ops._reorder_linear_weight(w.float(), BATCH_HINT) if supports(torch.float32) else None
        wb = ops._reorder_linear_weight(w, BATCH_HINT) if supports(torch.bfloat16) else None
        for m in rows:
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
            xf = x.float()
            sides = {
                "c-bf16": lambda x=x, p=packed, n=n: linear_bf16_cpu.linear(x, p, None, n),
                "F.linear bf16": lambda x=x, w=w: F.linear(x, w),
            }
            if wb is not None:
                sides["oneDNN bf16"] = lambda x=x, w=wb: ops._linear_pointwise(
                    x, w, None, "none", [], ""
                )
            if wf is not None:
                sides["oneDNN fp32"] = lambda x=xf, w=wf: ops._linear_pointwise(
                    x, w, None, "none", [], ""
                )
            cases.append((f"{name} {n}x{k}, {m} rows", sides))
    times: dict[tuple[str, str], list[float]] = {}
    with torch.inference_mode():
        for _ in range(args.runs):  # interleaved: every side of every case once per run
            for label, sides in cases:
                for side, fn in sides.items():
                    times.setdefault((label, side), []).append(timed(fn))

    def med(label: str, side: str) -> float:
        return statistics.median(times[(label, side)])

    others = [s for s in cases[0][1] if s != "c-bf16"]
    print(f"{'case':<28}" + "".join(f"{s + ' us':>26}" for s in cases[0][1])
          + "".join(f"{'x ' + s:>18}" for s in others))  # fmt: skip
    for label, sides in cases:
        cells = []
        for side in sides:
            v = [t * 1e6 for t in times[(label, side)]]
            cells.append(f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})")
        ratios = [med(label, s) / med(label, "c-bf16") for s in others]
        print(f"{label:<28}" + "".join(f"{c:>26}" for c in cells)
              + "".join(f"{r:>17.2f}x" for r in ratios))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
