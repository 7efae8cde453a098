"""`stepwise submit`, `stepwise stream`, `stepwise config`: a client of a running stack, and the
settings it would run with."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid

from pipeline import schema, settings
from pipeline.client import StepwiseClient, stream_view
from pipeline.config import PipelineConfig
from pipeline.errors import StepwiseError


def cmd_submit(args: argparse.Namespace) -> int:
    config = settings.build(PipelineConfig)
    if not config.kafka:
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
        async with StepwiseClient(config.kafka, config.topic_prefix) as c:
            await c.submit(job)
            print(f"submitted {job.id}", file=sys.stderr)
            async for msg in c.follow({job.id}, timeout_s=args.timeout):
                if isinstance(msg, schema.Event):
                    if msg.kind == "step":
                        print(f"  step {msg.step}: {msg.text}")
                    elif msg.kind == "verdict":
                        print(f"    {msg.verdict}" + (f" ({msg.detail})" if msg.detail else ""))
                    elif msg.kind == "backtrack":  # no verdict: a cut, not a resample
                        what = "backtrack to" if msg.verdict else "cut back to"
                        print(f"  <- {what} step {msg.step}: {msg.detail}")
                    elif msg.kind == "repair":
                        print(f"  ~ repaired in step {msg.step}: {msg.detail}")
                    elif msg.kind == "tool_call" and msg.tool_call is not None:
                        f = msg.tool_call.function
                        print(f"  tool call {msg.tool_call.id}: {f.name}({f.arguments})")
                    elif msg.kind == "accepted":
                        print("  accepted")
                else:
                    print(
                        f"result: {msg.status}  answer={msg.answer!r}  "
                        f"tokens={msg.usage.completion_tokens}  e2e={msg.timings.e2e_ms} ms  "
                        f"backtracks={msg.usage.backtracks}  stop={msg.budget.stop_reason}"
                    )
                    for call in msg.tool_calls:
                        print(f"  tool call: {call.function.name}({call.function.arguments})")
                    if msg.error:
                        print(f"  error [{msg.error.code}]: {msg.error.message}")
                    return 0 if msg.status in ("ok", "cached") else 1
        return 1

    return asyncio.run(go())


def cmd_stream(args: argparse.Namespace) -> int:
    return stream_view.run(args)


def cmd_config(args: argparse.Namespace) -> int:
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
