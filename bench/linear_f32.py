"""fp32 linear, a whole model's weights read in turn: the C kernel against oneDNN.

    python bench/linear_f32.py [--model r1-reasoner] [--runs 5] [--threads 2]
        [--rows 1,2,4,8,16,32,64,256]

Every projection of the model's layers (fused QKV, o, gate+up, down; then lm_head), one call
each in layer order, as a forward reads them: at decode's few rows each weight comes from
memory, not cache, so this is what a decode step's linears cost. Sides, interleaved run by run
in one process: `c-f32` (linear_f32_cpu, weights packed once: what the engine runs where it
has the kernel's vector loop) and `oneDNN` (cpu_linear.PackedLinear's prepacked GEMM: what it
ran before). Also the time to read the same bytes once (a sum over them): the floor. Prints
medians (min-max) of the runs in ms per pass and oneDNN / C.

To see an AVX2-only host's sides on an AVX-512 one, emulate it:
STEPWISE_KERNELS_CFLAGS=-mno-avx512f (the kernel's AVX2 build) and ONEDNN_MAX_CPU_ISA=AVX2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def shapes(model: str) -> list[tuple[int, int]]:
    """(out, in) of every projection a forward of `model` runs, in order."""
    from pipeline.engine.model_config import ModelConfig
    from pipeline.models.resolve import resolve_model

    path = resolve_model(model)
    cfg = ModelConfig.from_dict(json.loads((path / "config.json").read_text()))
    h, heads, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    qkv = (heads + 2 * cfg.num_key_value_heads) * hd
    layer = [(qkv, h), (h, heads * hd), (2 * cfg.intermediate_size, h), (h, cfg.intermediate_size)]
    return layer * cfg.num_hidden_layers + [(cfg.vocab_size, h)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="r1-reasoner")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,2,4,8,16,32,64,256")
    args = ap.parse_args(argv)

    import torch

    from pipeline.kernels import linear_f32_cpu
    from pipeline.kernels.cpu_linear import _OPS, BATCH_HINT

    torch.set_num_threads(args.threads)
    emulated = {k: os.environ[k] for k in ("STEPWISE_KERNELS_CFLAGS", "ONEDNN_MAX_CPU_ISA")
                if k in os.environ}  # fmt: skip
    print(f"threads {args.threads}; kernel loop: {linear_f32_cpu.simd()} (0 portable, 1 AVX2, "
          f"2 AVX-512); emulation: {emulated or 'none'}")  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, k, generator=gen) / k**0.5 for n, k in shapes(args.model)]
    packed = [linear_f32_cpu.pack(w) for w in weights]
    onednn = [_OPS._reorder_linear_weight(w, BATCH_HINT) for w in weights]
    flat = torch.cat([w.flatten() for w in weights])
    print(f"{len(weights)} projections, {flat.numel() * 4 / 1e6:.0f} MB of weights")
    rows = [int(r) for r in args.rows.split(",")]
    times: dict[tuple[int, str], list[float]] = {}

    def c_pass(xs):
        for w, p, x in zip(weights, packed, xs, strict=True):
            linear_f32_cpu.linear(x, p, None, w.shape[0])

    def onednn_pass(xs):
        for p, x in zip(onednn, xs, strict=True):
            _OPS._linear_pointwise(x, p, None, "none", [], "")

    with torch.inference_mode():
        inputs = {m: [torch.randn(m, w.shape[1], generator=gen) for w in weights] for m in rows}
        for m in rows:  # the two agree before anything is timed
            for w, p, x in list(zip(weights, packed, inputs[m], strict=True))[:4]:
                ref = torch.nn.functional.linear(x, w)
                torch.testing.assert_close(linear_f32_cpu.linear(x, p, None, w.shape[0]), ref)
        for _ in range(args.runs):  # interleaved: every side of every row count once per run
            for m in rows:
                for side, fn in (("c-f32", c_pass), ("oneDNN", onednn_pass)):
                    fn(inputs[m])  # the first pass after another side's: not timed
                    t0 = time.perf_counter()
                    fn(inputs[m])
                    times.setdefault((m, side), []).append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            flat.sum()
            times.setdefault((0, "read"), []).append(time.perf_counter() - t0)
    floor = statistics.median(times[(0, "read")]) * 1e3
    print(f"reading the weights once (sum): {floor:.1f} ms")
    print(f"{'rows':>5}{'c-f32 ms':>22}{'oneDNN ms':>22}{'oneDNN / C':>12}{'C / floor':>11}")
    summary = {"bench": "linear_f32", "model": args.model, "threads": args.threads,
               "emulation": emulated, "read_ms": round(floor, 2), "rows": {}}  # fmt: skip
    for m in rows:
        cell = {}
        for side in ("c-f32", "oneDNN"):
            v = [t * 1e3 for t in times[(m, side)]]
            cell[side] = (statistics.median(v), min(v), max(v))
        ratio = cell["oneDNN"][0] / cell["c-f32"][0]
        spans = "".join(f"{f'{a:.1f} ({b:.1f}-{c:.1f})':>22}" for a, b, c in cell.values())
        print(f"{m:>5}{spans}{ratio:>11.2f}x{cell['c-f32'][0] / floor:>10.2f}x")
        summary["rows"][m] = {
            "c_ms": round(cell["c-f32"][0], 2),
            "onednn_ms": round(cell["oneDNN"][0], 2),
            "ratio": round(ratio, 2),
        }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
