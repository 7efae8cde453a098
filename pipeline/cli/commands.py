"""The `stepwise` subcommands. Each imports its heavy dependencies lazily."""

from __future__ import annotations

import argparse
import sys
import time

from pipeline.errors import StepwiseError


def _add_format_arg(p: argparse.ArgumentParser) -> None:
    from pipeline.formats import format_names

    p.add_argument(
        "--reasoning-format",
        default=None,
        choices=format_names(),
        help="how the model writes its reasoning (default: STEPWISE_REASONING_FORMAT, else "
        "detected from the model; docs/reasoning-formats.md)",
    )


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default="tiny-reasoner",
        help="checkpoint dir or a known name: tiny-reasoner (bundled), smollm2 (prepared)",
    )
    _add_format_arg(p)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")


def _add_engine_choice(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        choices=["native", "vllm"],
        default=None,
        help="prefill/decode engine (default STEPWISE_ENGINE or native); vllm: a vLLM server "
        "at STEPWISE_VLLM_URL, else one is started (docs/vllm.md)",
    )


def _engine_from_args(args: argparse.Namespace):
    from pipeline.config import EngineConfig
    from pipeline.engine import Engine
    from pipeline.engine.prepare import resolve_model

    path = resolve_model(args.model)
    return Engine(
        EngineConfig(
            model=str(path),
            dtype=args.dtype,
            device=args.device,
            num_threads=args.threads,
            reasoning_format=args.reasoning_format,
        )
    )


def cmd_generate(args: argparse.Namespace) -> int:
    from pipeline.engine import Request
    from pipeline.engine.tokenizer import IncrementalDetokenizer
    from pipeline.stage.sampling import sampling_params

    engine = _engine_from_args(args)
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
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from pipeline.engine import prepare

    return prepare.run(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from pipeline.evals import runner

    return runner.run(args)


WORKER_CLASSES = {
    "ingest": "pipeline.ingest.worker:IngestWorker",
    "prefill": "pipeline.prefill.worker:PrefillWorker",
    "decode": "pipeline.decode.worker:DecodeWorker",
    "budget": "pipeline.budget.worker:BudgetWorker",
}


def cmd_verify(args: argparse.Namespace) -> int:
    from pipeline.verify import offline

    return offline.run(args)


def cmd_worker(args: argparse.Namespace) -> int:
    import asyncio
    import importlib
    import logging

    from pipeline import settings

    current = settings.current()
    if args.name == "verify":  # a Celery worker, not a Kafka stage
        from pipeline.verify import tasks

        return tasks.main(current)
    if args.name == "gateway":  # HTTP / WebSocket / OpenAI API on STEPWISE_GATEWAY_PORT
        from pipeline.gateway.main import main as gateway_main

        gateway_main(current.gateway())
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    module, _, cls = WORKER_CLASSES[args.name].partition(":")
    worker_cls = getattr(importlib.import_module(module), cls)

    async def serve() -> None:
        # aiokafka clients must be created inside the running event loop.
        worker = worker_cls(current.pipeline())
        await worker.run(install_signals=True, freeze_gc=True)

    asyncio.run(serve())
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    import signal as _signal

    from pipeline import settings
    from pipeline.gateway.settings import check_exposure
    from pipeline.local.stack import Stack

    current = settings.current()
    # The stack's gateway would refuse an open bind beyond loopback: refuse before anything
    # starts (the gateway's own config cannot be built yet: Redis may be the embedded one).
    check_exposure(
        current["GATEWAY_HOST"],
        current["GATEWAY_PORT"],
        has_keys=bool(current["API_KEYS"]) or bool(current["API_KEYS_REDIS"]),
        allow_open=bool(current["GATEWAY_ALLOW_OPEN"]),
    )
    pipeline_config = current.pipeline()
    if pipeline_config.engine == "native":
        from pipeline.engine.model_config import ModelConfig
        from pipeline.engine.prepare import resolve_model

        # Before anything starts: a model whose architecture the native engine cannot run
        # fails here, with the error naming `--engine vllm`, not in a worker's log later.
        ModelConfig.from_dir(resolve_model(pipeline_config.model))
    stack = Stack(pipeline_config, log_dir=args.log_dir)
    print("starting services and workers ...", flush=True)
    with stack:
        for line in stack.describe():
            print("  " + line)
        print(f"  export STEPWISE_KAFKA={stack.services.bootstrap_servers}")
        print(f"  export STEPWISE_REDIS={stack.services.redis_url}")
        print("ready; Ctrl-C stops everything", flush=True)
        # SIGTERM stops everything the way Ctrl-C does (and Ctrl-C works even where the shell
        # started us with SIGINT ignored, as it does for background jobs).
        for sig in (_signal.SIGINT, _signal.SIGTERM):
            _signal.signal(sig, _signal.default_int_handler)
        try:
            while all(p.poll() is None for p in stack.procs.values()):
                time.sleep(0.5)
        except KeyboardInterrupt:
            print("stopping: workers drain, then services stop ...", flush=True)
        dead = [n for n, p in stack.procs.items() if p.poll() is not None]
        if dead:
            print(f"worker(s) exited: {', '.join(dead)}; stopping", file=sys.stderr)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    import asyncio
    import uuid

    from pipeline import schema, settings
    from pipeline.client import StepwiseClient

    kafka, prefix = settings.current()["KAFKA"], settings.current()["TOPIC_PREFIX"]
    if not kafka:
        raise StepwiseError("set STEPWISE_KAFKA (`stepwise up` prints it)", code="no_services")
    job = schema.Job(
        id=args.id or f"cli-{uuid.uuid4().hex[:12]}",
        prompt=args.problem,
        params=schema.JobParams(
            temperature=args.temperature,
            seed=args.seed,
            max_tokens=args.max_tokens,
            verify=args.verify,
        ),
    )

    async def go() -> int:
        async with StepwiseClient(kafka, prefix) as c:
            await c.submit(job)
            print(f"submitted {job.id}", file=sys.stderr)
            async for msg in c.follow({job.id}, timeout_s=args.timeout):
                if isinstance(msg, schema.Event):
                    if msg.kind == "step":
                        print(f"  step {msg.step}: {msg.text}")
                    elif msg.kind == "verdict":
                        print(f"    {msg.verdict}" + (f" ({msg.detail})" if msg.detail else ""))
                    elif msg.kind == "backtrack":
                        print(f"  <- backtrack to step {msg.step}: {msg.detail}")
                    elif msg.kind == "accepted":
                        print("  accepted")
                else:
                    print(
                        f"result: {msg.status}  answer={msg.answer!r}  "
                        f"tokens={msg.usage.completion_tokens}  e2e={msg.timings.e2e_ms} ms  "
                        f"backtracks={msg.usage.backtracks}  stop={msg.budget.stop_reason}"
                    )
                    if msg.error:
                        print(f"  error [{msg.error.code}]: {msg.error.message}")
                    return 0 if msg.status in ("ok", "cached") else 1
        return 1

    return asyncio.run(go())


def cmd_stream(args: argparse.Namespace) -> int:
    from pipeline.client import stream_view

    return stream_view.run(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from pipeline.local import demo

    return demo.main(args.n, args.seed, args.model, args.reasoning_format)


def cmd_config(args: argparse.Namespace) -> int:
    import json

    from pipeline import settings

    current = settings.current()
    rows = [r for r in current.rows() if args.concern in (None, r["concern"])]
    if args.json:
        print(json.dumps({"settings": rows, "unknown": list(current.unknown)}, indent=1))
        return 0
    width = max(len(r["variable"]) for r in rows) if rows else 10
    for r in rows:
        value = r["value"] if r["value"] != "" else "-"
        print(f"{r['variable']:<{width}}  {value:<26} {r['source']:<8} {r['help']}")
    for line in current.unknown_report():
        print(line)
    return 0
