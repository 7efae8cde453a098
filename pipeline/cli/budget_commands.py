"""`stepwise budget status [--watch]`: each SLO class's live limits, what the budget law read and
what it last decided, and why (docs/budget.md), from the state the budget worker keeps in
Redis (STEPWISE_REDIS)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import msgspec
from redis.asyncio import Redis
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from pipeline.budget import SLO_CLASSES
from pipeline.budget.state import ClassStatus, Status, read, read_status
from pipeline.config import PipelineConfig
from pipeline.errors import StepwiseError


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def render(status: Status | None, published: dict, now_ms: int) -> Group:
    """The status as tables: limits per class, then the law's inputs and decision."""
    if status is None:
        note = "no budget worker has reported (is `stepwise worker budget` running?)"
        rows = [Text(note, style="yellow")]
        for c, limits in published.items():
            rows.append(Text(f"{c}: last published {limits}" if limits else f"{c}: defaults"))
        return Group(*rows)
    age = (now_ms - status.ts_ms) / 1000
    head = Text(f"budget worker {status.worker}, {age:.1f} s ago", style="bold")
    limits = Table(title="live limits", title_justify="left")
    for col in ("class", "SLO s", "rung", "pressure", "thinking", "steps", "resample cap",
                "early exit", "probe every", "shed", "retry after s"):  # fmt: skip
        limits.add_column(col, justify="right")
    law = Table(title="what the law read, and did", title_justify="left")
    for col in ("class", "predicted/SLO", "new job", "running", "done", "pace tok/s",
                "occupancy", "queue s", "arrivals/s", "shed/s", "running jobs",
                "deadline cuts", "decision"):  # fmt: skip
        law.add_column(col, justify="right" if col != "decision" else "left")
    for c in status.classes:
        lim = c.limits
        cap = lim.get("resample_cap")
        limits.add_row(
            c.slo_class, _num(lim.get("slo_ms", 0) / 1000, "{:g}"), c.rung,
            _num(lim.get("pressure")), str(lim.get("max_thinking_tokens")),
            str(lim.get("max_steps")), "none" if cap is None else str(cap),
            "on" if lim.get("early_exit") else "off", str(lim.get("probe_effort")),
            f"{lim.get('shed', 0):.0%}", _num(lim.get("retry_after_s"), "{:g}"),
        )  # fmt: skip
        law.add_row(
            c.slo_class, _num(c.predicted_ratio), _num(c.new_job_ratio), _num(c.running_ratio),
            _num(c.done_ratio), _num(c.pace_tok_s, "{:.1f}"), f"{c.occupancy:.0%}",
            _num(c.queue_s, "{:.1f}"), _num(c.arrivals_per_s), _num(c.shed_per_s),
            str(c.running_jobs), str(c.deadline_cuts), c.decision,
        )  # fmt: skip
    return Group(head, limits, law)


async def _snapshot(redis: Redis, prefix: str) -> tuple[Status | None, dict]:
    status = await read_status(redis, prefix)
    published = {c: await read(redis, prefix, c) for c in SLO_CLASSES}
    return status, published


async def _status(args: argparse.Namespace) -> int:
    cfg = PipelineConfig.from_settings()
    if not cfg.redis:
        raise StepwiseError(
            "no Redis given: set STEPWISE_REDIS (what `stepwise up` printed)", code="no_services"
        )
    redis = Redis.from_url(cfg.redis, socket_timeout=2)
    try:
        status, published = await _snapshot(redis, cfg.topic_prefix)
        if args.json:
            classes: list[ClassStatus] = status.classes if status else []
            out = {
                "status": msgspec.to_builtins(status) if status else None,
                "published": {
                    c: msgspec.to_builtins(v.to_budget()) if v else None
                    for c, v in published.items()
                },  # fmt: skip
                "classes": [c.slo_class for c in classes],
            }
            print(json.dumps(out, indent=1))
            return 0
        console = Console()
        if not args.watch:
            console.print(render(status, published, int(time.time() * 1000)))
            return 0
        with Live(render(status, published, int(time.time() * 1000)), console=console) as live:
            while True:
                await asyncio.sleep(args.interval)
                status, published = await _snapshot(redis, cfg.topic_prefix)
                live.update(render(status, published, int(time.time() * 1000)))
    finally:
        await redis.aclose()


def cmd_budget_status(args: argparse.Namespace) -> int:
    return asyncio.run(_status(args))
