"""`stepwise worker`, `stepwise up`, `stepwise demo`: the pipeline's processes."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
import time

from pipeline import settings
from pipeline.cli.parser import WORKER_CLASSES
from pipeline.config import PipelineConfig
from pipeline.engine.model_config import ModelConfig
from pipeline.gateway.config import GatewayConfig, check_exposure
from pipeline.local import demo
from pipeline.local.stack import Stack
from pipeline.models.resolve import resolve_model
from pipeline.stage.processes import EXIT_GRACE_S, exit_within

# The workers that are not Kafka stages: their entry points, by name (each loads its own stack:
# Celery and the checker, the web app).
ENTRY_POINTS = {
    "verify": "pipeline.verify.worker:main",
    "gateway": "pipeline.gateway.main:serve",
}


def _load(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def cmd_worker(args: argparse.Namespace) -> int:
    current = settings.current()
    if args.name in ENTRY_POINTS:
        return int(_load(ENTRY_POINTS[args.name])(current) or 0)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker_cls = _load(WORKER_CLASSES[args.name])

    async def serve() -> None:
        # aiokafka clients must be created inside the running event loop.
        worker = worker_cls(settings.build(PipelineConfig, current))
        code = 1
        try:
            await worker.run(install_signals=True, freeze_gc=True)
            code = 0
        finally:  # stopped and released: the process itself must not outlive it by long
            exit_within(EXIT_GRACE_S, code)

    asyncio.run(serve())
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    current = settings.current()
    # The stack's gateway would refuse an open bind beyond loopback: refuse before anything
    # starts (the gateway's full config cannot be built yet: Redis may be the embedded one).
    gw = settings.build(GatewayConfig, current)
    check_exposure(
        gw.host, gw.port, has_keys=bool(gw.api_keys) or gw.api_keys_redis, allow_open=gw.allow_open
    )
    pipeline_config = settings.build(PipelineConfig, current)
    if pipeline_config.engine == "native":
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
        # SIGTERM stops everything the way Ctrl-C does (and Ctrl-C works even where the shell
        # started us with SIGINT ignored, as it does for background jobs).
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.default_int_handler)
        try:
            if "gateway" in stack.procs:  # "ready" once a client can connect
                print("waiting for the gateway ...", flush=True)
                stack.wait_for_gateway()
            print("ready; Ctrl-C stops everything", flush=True)
            while all(p.poll() is None for p in stack.procs.values()):
                time.sleep(0.5)
        except KeyboardInterrupt:
            print("stopping: workers drain, then services stop ...", flush=True)
        dead = [n for n, p in stack.procs.items() if p.poll() is not None]
        if dead:
            print(f"worker(s) exited: {', '.join(dead)}; stopping", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    verify = args.verify or demo.DEFAULT_VERIFY
    return demo.main(args.n, args.seed, args.model, args.reasoning_format, verify, args.compare)
