"""A decode step with the decoder stack in one C call against the same step module by module.

    python bench/decoder_stack.py [--model r1-reasoner] [--batch 1,8,16] [--steps 64]
        [--context 400] [--runs 5] [--threads 2] [--dtype float32]

One engine (fp32 unless --dtype says otherwise: bf16 fuses where the bf16 C linear serves,
cpu_linear.bf16_kernel_applies; prepacked as the engine runs it); sides, interleaved run by
run: `fused` (`CausalLM.cpu_stack`: kernels/decoder_cpu.py, what the engine runs on CPU where
it applies) and `modules` (the same model with the stack taken off: the layers' modules, as
before). Each run of a side adds `batch` sequences of `context` prompt tokens, runs their
prefill untimed, then times `steps` engine steps of all of them decoding (sampling included,
greedy). Both sides generate the same tokens (checked). Prints medians (min-max) in ms a step
and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="r1-reasoner")
    ap.add_argument("--batch", default="1,8,16", help="sequences decoding at once")
    ap.add_argument("--steps", type=int, default=64, help="decode steps timed a run")
    ap.add_argument("--context", type=int, default=400, help="prompt tokens a sequence")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)

    import torch

    from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
    from pipeline.models.resolve import resolve_model

    path = resolve_model(args.model)
    batches = [int(b) for b in args.batch.split(",")]
    engine = Engine(
        EngineConfig(
            model=str(path), dtype=args.dtype, num_threads=args.threads,
            max_num_seqs=max(batches), max_num_batched_tokens=max(2048, args.context),
            max_model_len=args.context + args.steps + 8,
        )
    )  # fmt: skip
    model = engine.runner.model
    stack = model.cpu_stack
    if stack is None:
        print(f"the stack does not fuse here (no C linear kernel for {args.dtype}): no sides")
        return 1
    vocab = engine.model_config.vocab_size
    gen = torch.Generator().manual_seed(0)
    greedy = SamplingParams(temperature=0, max_tokens=args.steps + 1, ignore_eos=True)
    times: dict[tuple[int, str], list[float]] = {}
    tokens: dict[tuple[int, str], list[list[int]]] = {}
    counter = 0

    def run(b: int, side: str) -> None:
        nonlocal counter
        model.cpu_stack = stack if side == "fused" else None
        seqs = []
        for ids in prompts[b]:  # the same prompts every run and side
            counter += 1
            seqs.append(engine.add(Request(f"r{counter}", ids, greedy)))
        while any(s.num_output_tokens < 1 for s in seqs):  # prefill and the first token
            engine.step()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            engine.step()
        times.setdefault((b, side), []).append((time.perf_counter() - t0) / args.steps)
        while engine.has_unfinished():
            engine.step()
        tokens.setdefault((b, side), [list(s.token_ids) for s in seqs])

    def prompt() -> list[int]:
        return torch.randint(10, vocab - 10, (args.context,), generator=gen).tolist()

    prompts = {b: [prompt() for _ in range(b)] for b in batches}
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"{args.model} {args.dtype}: threads {args.threads}, context {args.context}, "
          f"steps {args.steps}, load before {load}")  # fmt: skip
    for _ in range(args.runs):
        for b in batches:
            for side in ("fused", "modules"):
                run(b, side)
    model.cpu_stack = stack
    summary = {"bench": "decoder_stack", "model": args.model, "dtype": args.dtype,
               "threads": args.threads,
               "context": args.context, "steps": args.steps, "runs": args.runs,
               "batch": {}}  # fmt: skip
    head = ("batch", "fused ms", "modules ms", "modules / fused", "same tokens")
    print("".join(f"{h:>{w}}" for h, w in zip(head, (6, 22, 22, 17, 13), strict=True)))
    for b in batches:
        cell = {}
        for side in ("fused", "modules"):
            v = [t * 1e3 for t in times[(b, side)]]
            cell[side] = (statistics.median(v), min(v), max(v))
        ratio = cell["modules"][0] / cell["fused"][0]
        same = tokens[(b, "fused")] == tokens[(b, "modules")]
        spans = "".join(f"{f'{a:.1f} ({lo:.1f}-{hi:.1f})':>22}" for a, lo, hi in cell.values())
        print(f"{b:>6}{spans}{ratio:>16.2f}x{str(same):>13}")
        summary["batch"][b] = {
            "fused_ms": round(cell["fused"][0], 2),
            "modules_ms": round(cell["modules"][0], 2),
            "fused_range": [round(x, 2) for x in cell["fused"][1:]],
            "modules_range": [round(x, 2) for x in cell["modules"][1:]],
            "ratio": round(ratio, 2),
            "same_tokens": same,
        }
    print(json.dumps(summary))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
