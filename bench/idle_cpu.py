"""Idle cost of a local stack: the CPU every process of `stepwise up` burns with no jobs.

    python bench/idle_cpu.py [--seconds 60] [--settle 10] [--model tiny-reasoner]

Starts the whole stack (embedded broker and Redis, every worker: ingest, prefill, decode,
verify, budget, gateway), sends one warm-up job through it so that every worker is up and has
done its first work, waits `--settle` seconds, then reads the user + system CPU time of every
process under this one (the services, the workers and what they started: decode's engine core,
Celery's pool) at the start and the end of `--seconds` with no jobs. Prints each process's share
of one core and the sum; the last line is one JSON object. Baseline: the same stack before a
change (run it on both trees in one sitting).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import schema  # noqa: E402
from pipeline.client import StepwiseClient  # noqa: E402
from pipeline.config import PipelineConfig  # noqa: E402
from pipeline.local.stack import WORKERS, Stack  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> dict[int, str]:
    """Every live process below `root` ({pid: short name from its command line})."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        found[pid] = name_of([a.decode(errors="replace") for a in argv if a])
        todo += children.get(pid, [])
    return found


def name_of(argv: list[str]) -> str:
    """`worker decode` for a worker, the binary's name for a service, `spawn` for a child."""
    if "worker" in argv:
        return "worker " + argv[argv.index("worker") + 1]
    if any("spawn_main" in a or "multiprocessing" in a for a in argv):
        return "spawned child"
    if any("celery" in a for a in argv):
        return "celery child"
    return Path(argv[0]).name if argv else "?"


def cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


async def warm_up(kafka: str, prefix: str) -> None:
    async with StepwiseClient(kafka, prefix, events=False) as client:
        job = schema.Job(id=f"idle-warm-{uuid.uuid4().hex[:6]}", prompt="1 + 1")
        await client.submit(job)
        async for _ in client.follow({job.id}, timeout_s=300):
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="idle window measured")
    ap.add_argument("--settle", type=float, default=10.0, help="wait after the warm-up job")
    ap.add_argument("--model", default="tiny-reasoner")
    args = ap.parse_args()

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    config = PipelineConfig.from_settings(model=args.model, dtype="float32")
    log_dir = tempfile.mkdtemp(prefix="bench-idle-")
    with Stack(config, workers=WORKERS, log_dir=log_dir) as stack:
        asyncio.run(warm_up(stack.services.bootstrap_servers, config.topic_prefix))
        time.sleep(args.settle)
        procs = descendants(os.getpid())
        start = {pid: cpu_s(pid) for pid in procs}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        end = {pid: cpu_s(pid) for pid in procs}
    shares: dict[str, float] = {}
    for pid, name in procs.items():
        if start[pid] is None or end[pid] is None:
            continue
        key = name if name not in shares else f"{name} ({pid})"
        shares[key] = 100 * (end[pid] - start[pid]) / wall
    total = sum(shares.values())
    for name, share in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<28}{share:6.1f}% of a core")
    print(f"  {'all ' + str(len(shares)) + ' processes':<28}{total:6.1f}% of a core")
    print(
        json.dumps(
            {
                "seconds": round(wall, 1),
                "processes": len(shares),
                "total_pct": round(total, 1),
                "by_process": {k: round(v, 2) for k, v in shares.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
