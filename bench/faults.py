"""Infrastructure faults under load (issue 24): the matrix of tests/integration/test_faults.py on
one stack of its own, beside a run without a fault, as a table.

Each case sends the same batch of jobs (same prompts and settings, new ids: a job id is an
idempotency key) to a stack of its own (tools/faults.py: embedded broker and Redis on
free ports, real ingest, prefill, decode and Celery verify worker processes), injects its fault
once every job is sent and decode is stepping, follows every job to its Result (or the
deadline), then counts every Result record on the topic per job id.

    python bench/faults.py [--jobs 16] [--deadline 150]

Columns: jobs sent; Results (jobs with at least one); lost (none by the deadline); duplicated
(more than one Result record); not ok (a Result other than `ok`); worst latency (submit to
Result, as the client saw it, the slowest job of the case); worst extra (that minus the
baseline's worst); re-prefilled (jobs whose KV decode could not import); verdict timeouts
(steps counted `unknown` because no verdict came in time). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.faults import FAULTS, FaultRun, FaultStack, make_jobs, run_case  # noqa: E402

COLUMNS = (
    ("fault", "fault"),
    ("sent", "jobs sent"),
    ("results", "Results"),
    ("lost", "lost"),
    ("duplicated", "duplicated"),
    ("not_ok", "not ok"),
    ("worst_s", "worst latency s"),
    ("extra_s", "worst extra s"),
    ("reprefilled", "re-prefilled"),
    ("verdict_timeouts", "verdict timeouts"),
)


def table(rows: list[dict[str, object]]) -> str:
    """A Markdown table of the rows, in COLUMNS' order."""
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |"]
    lines.append("|" + "---|" * len(COLUMNS))
    for row in rows:
        cells = ["-" if row[key] is None else str(row[key]) for key, _ in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def run_matrix(n: int, deadline_s: float, faults: list[str]) -> list[FaultRun]:
    with tempfile.TemporaryDirectory(prefix="stepwise-faults-") as logs:
        async with FaultStack(Path(logs)) as stack:
            runs = []
            for fault in faults:
                stack.heal()  # a stage the last fault left without a process gets one
                jobs = make_jobs(n, f"{fault}-{uuid.uuid4().hex[:6]}")
                run = await run_case(stack, fault, jobs, deadline_s=deadline_s)
                print(f"{fault}: {run.row()}", file=sys.stderr, flush=True)
                runs.append(run)
            return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=16, help="jobs per case")
    parser.add_argument("--deadline", type=float, default=150.0, help="seconds per case")
    args = parser.parse_args()
    faults = list(FAULTS)  # "none" first: the baseline
    load = os.getloadavg()[0]
    runs = asyncio.run(run_matrix(args.jobs, args.deadline, faults))
    baseline = runs[0]
    rows = [run.row(baseline) for run in runs]
    print(table(rows))
    print(f"load average at the start: {load:.2f}; {os.cpu_count()} cores")
    summary = {
        "bench": "faults",
        "date": datetime.date.today().isoformat(),
        "jobs": args.jobs,
        "load": round(load, 2),
        "rows": rows,
        "ok": all(not r.lost and not r.duplicated and not r.not_ok for r in runs),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
