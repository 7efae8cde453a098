"""`stepwise generate`, `stepwise models`, `stepwise eval`: the engine on its own, no pipeline."""

from __future__ import annotations

import argparse
import sys
import time

from pipeline.config import EngineConfig
from pipeline.engine import Engine, Request
from pipeline.engine.tokenizer import IncrementalDetokenizer
from pipeline.errors import ModelLoadError, StepwiseError
from pipeline.evals import runner
from pipeline.models.prepare import prepare_r1_reasoner, prepare_smollm2
from pipeline.models.resolve import list_models, resolve_model
from pipeline.reasoning.sampling import sampling_params


def cmd_generate(args: argparse.Namespace) -> int:
    engine = Engine(
        EngineConfig(
            model=str(resolve_model(args.model)),
            dtype=args.dtype,
            device=args.device,
            num_threads=args.threads,
            reasoning_format=args.reasoning_format,
            speculative=args.speculative_config,
        )
    )
    if engine.tokenizer is None:
        raise StepwiseError("this model has no tokenizer.json: `generate` needs text")
    use_chat = args.chat if args.chat is not None else engine.tokenizer.has_chat_template
    prompt = [{"role": "user", "content": args.prompt}] if use_chat else args.prompt
    params = sampling_params(args, max_tokens=args.max_tokens)  # the CLI flags share the names
    seq = engine.add(Request("cli", engine.encode_prompt(prompt), params))
    detok = IncrementalDetokenizer(engine.tokenizer)
    t0 = time.perf_counter()
    first = None
    while engine.has_unfinished():
        for out in engine.step():
            first = first or time.perf_counter()
            sys.stdout.write(detok.push(out.token_id))
            sys.stdout.flush()
    dt = time.perf_counter() - t0
    n = seq.num_output_tokens
    decode_s = max(dt - ((first or t0) - t0), 1e-9)
    print(
        f"\n\n[{n} tokens in {dt:.2f}s: ttft {((first or t0) - t0) * 1e3:.0f} ms, "
        f"{max(n - 1, 0) / decode_s:.1f} tok/s decode, {seq.num_steps} steps, "
        f"finish={seq.finish_reason}]",
        file=sys.stderr,
    )
    st = engine.stats
    if st.num_spec_proposed:
        print(
            f"[speculative: {st.num_spec_accepted} of {st.num_spec_proposed} proposed tokens "
            f"accepted ({100 * st.num_spec_accepted / st.num_spec_proposed:.0f}%), "
            f"{(st.num_spec_accepted + st.num_spec_forwards) / max(st.num_spec_forwards, 1):.2f}"
            " tokens per verifying pass]",
            file=sys.stderr,
        )
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    """`stepwise models prepare NAME [--dest DIR] [--force]` and `stepwise models list`."""
    if args.models_command == "prepare":
        try:
            start = time.perf_counter()
            prepare = prepare_r1_reasoner if args.name == "r1-reasoner" else prepare_smollm2
            path = prepare(args.dest, force=args.force)
        except ModelLoadError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{args.name} ready at {path} ({time.perf_counter() - start:.1f} s)")
        return 0
    print(f"{'name':<14} {'format':<12} {'status':<40} path")
    for row in list_models():
        print(f"{row['name']:<14} {row['format']:<12} {row['status']:<40} {row['path']}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    return runner.run(args)
