"""Where the native engine's time goes on engine_throughput's workload, per component.

    python bench/engine_profile.py [--model smollm2] [--dtypes float32,bfloat16] [--threads 2]

The same requests as bench/engine_throughput.py (32 seeded random prompts, forced lengths),
run once through the engine with a timer around each piece of the forward: the linear layers
(the prepacked oneDNN matmuls), paged attention, the element-wise kernels (RMSNorm with its
residual add, SiLU-and-mul, rotary), split into decode-sized calls (<= 64 rows) and prefill
chunks; "rest" is the wall time outside them (scheduling, sampling, the embedding, Python).
Then the layers' matmuls alone at decode sizes, timed two ways: one weight hot in cache (how
engine_throughput's roofline times them) and every layer's weight in turn (how a forward reads
them), with the ratio between the two: what a model whose weights do not fit in cache pays.
A diagnosis, not a comparison: engine_throughput.py is the side-by-side benchmark.
The pieces are timed between Python calls, so the engine runs its layers module by module
here, not as the one C call of the fused stack (CausalLM.cpu_stack, taken off for the profile;
bench/decoder_stack.py compares the two).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_throughput as et  # noqa: E402

DECODE_ROWS = 64  # calls with more rows are prefill chunks


def _timed(owner, name: str, label: str, times: Counter, calls: Counter) -> tuple:
    """Wrap `owner.name` so each call adds its wall time to `times[label/decode|prefill]`;
    returns what puts the original back."""
    fn = getattr(owner, name)

    def wrapper(*args, **kwargs):
        key = f"{label}/{'decode' if args[0].shape[0] <= DECODE_ROWS else 'prefill'}"
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        times[key] += time.perf_counter() - t0
        calls[key] += 1
        return out

    setattr(owner, name, wrapper)
    return owner, name, fn


def profile_engine(path: Path, dtype: str, threads: int, reqs) -> dict:
    import pipeline.engine.model as model_module
    from pipeline.engine import Engine, EngineConfig, SamplingParams
    from pipeline.kernels import elementwise

    times: Counter = Counter()
    calls: Counter = Counter()
    engine = Engine(
        EngineConfig(
            model=str(path), dtype=dtype, device="cpu", max_num_seqs=et.MAX_NUM_SEQS,
            max_num_batched_tokens=et.MAX_NUM_BATCHED_TOKENS, num_threads=threads,
            kv_cache_memory_gb=1.0,
        )
    )  # fmt: skip
    engine.runner.model.cpu_stack = None  # the modules' path: its pieces are Python calls
    originals = [_timed(model_module, "paged_attention", "attention", times, calls)]
    for name in ("rms_norm", "add_rms_norm", "rotary", "silu_and_mul"):
        originals.append(_timed(elementwise, name, "elementwise", times, calls))
    for module in engine.runner.model.modules():
        if "Linear" in type(module).__name__:
            _timed(module, "forward", "linear", times, calls)

    def params(n: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)

    try:
        warm = [[et.MIN_TOKEN_ID + i] * (8 + 16 * i) for i in range(4)]
        engine.generate(warm, [params(8)] * len(warm))
        times.clear()
        calls.clear()
        t0 = time.perf_counter()
        engine.generate([r.prompt for r in reqs], [params(r.out_len) for r in reqs])
        wall = time.perf_counter() - t0
    finally:
        for owner, name, fn in originals:  # module functions: put back for whoever runs next
            setattr(owner, name, fn)
    parts = {k: {"s": v, "calls": calls[k]} for k, v in sorted(times.items())}
    return {"wall_s": wall, "parts": parts, "rest_s": wall - sum(times.values())}


def hot_and_cold(dims: dict, dtype: str, threads: int, rows: int, reps: int = 20) -> dict:
    """One layer's matmuls at `rows` rows: a single weight per shape over and over (hot), and
    each of `layers` weights in turn (cold, as a forward reads them). Microseconds a layer."""
    import torch
    from torch import nn

    from pipeline.kernels.cpu_linear import replacement

    torch.set_num_threads(threads)
    dt = getattr(torch, dtype)

    def engine_linear(k: int, n: int) -> nn.Module:  # the module the engine runs for it
        lin = nn.Linear(k, n, bias=False).to(dt).requires_grad_(False)
        return replacement(lin, et.MAX_NUM_SEQS) or lin

    out = {}
    for name, count in (("hot", 1), ("cold", dims["layers"])):
        total = 0.0
        for k, n in et.linear_shapes(dims):
            weights = [engine_linear(k, n) for _ in range(count)]
            x = torch.randn(rows, k).to(dt)
            for w in weights:
                w(x)
            t0 = time.perf_counter()
            for _ in range(reps):
                for w in weights:
                    w(x)
            total += (time.perf_counter() - t0) / (reps * count)
        out[name] = 1e6 * total
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from pipeline.kernels.cpu_linear import bf16_kernel_applies, supports
    from pipeline.models.resolve import resolve_model

    path = resolve_model(args.model)
    dims = et.model_dims(path)
    reqs = et.make_requests(args.num_requests, args.seed, dims["vocab"])
    print(f"model {path}; threads {args.threads}; load {et.load_avg()}")
    summary: dict = {"bench": "engine_profile", "model": args.model, "threads": args.threads}
    for dtype in args.dtypes.split(","):
        import torch

        if not supports(getattr(torch, dtype)) and not (
            dtype == "bfloat16" and bf16_kernel_applies()
        ):
            print(f"[{dtype}] no oneDNN prepacked path (nor the C bf16 kernel) here: skipped")
            continue
        prof = profile_engine(path, dtype, args.threads, reqs)
        wall = prof["wall_s"]
        print(f"\n== {dtype}: wall {wall:.2f} s")
        print(f"{'part':<22}{'s':>8}{'share':>8}{'calls':>8}{'us/call':>10}")
        for key, v in prof["parts"].items():
            print(f"{key:<22}{v['s']:>8.3f}{v['s'] / wall:>8.1%}{v['calls']:>8}"
                  f"{1e6 * v['s'] / max(v['calls'], 1):>10.1f}")  # fmt: skip
        print(f"{'rest':<22}{prof['rest_s']:>8.3f}{prof['rest_s'] / wall:>8.1%}")
        matmuls = {rows: hot_and_cold(dims, dtype, args.threads, rows) for rows in (1, 16, 32)}
        for rows, m in matmuls.items():
            print(f"one layer's matmuls at {rows:>2} rows: hot {m['hot']:.0f} us, cold "
                  f"{m['cold']:.0f} us: cold / hot {m['cold'] / m['hot']:.2f}x")  # fmt: skip
        summary[dtype] = {**prof, "matmuls_us_per_layer": matmuls}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
