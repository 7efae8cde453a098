"""Step checks per second through one Celery verify worker process, beside the checker alone,
and what each verdict path costs a decode step.

    python bench/verify_throughput.py --n 500

Inputs: every step of the gold traces of `n` held-out problems (and each with one number
changed, so half the checks are contradictions), checked with the chain before it, in order.
Baseline, same run, same inputs: `check_step` called in this process. Then the same checks go
through the real path: Celery task on a Redis broker -> one worker (`stepwise worker verify
--concurrency 1`) -> verdicts on a Redis stream. Services: STEPWISE_REDIS if set, else an
embedded redis-server.

The paths a verdict takes (issue 35), each timed per check on the same inputs:
  * fast path: `fast_verdict` in the decode process (a false claim with no unknowns is
    contradicted there; everything else goes on to the checker): its cost per step, the share
    of checks it decides, and any verdict the checker would give otherwise (must be none);
  * checker in process: `check_step`, as `stepwise eval`'s local checker runs it;
  * Celery round trip: one check at a time, from the send to its verdict on the Redis stream:
    what a step waits for its verdict at low load (throughput above is the loaded figure).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def inputs(n: int, seed: int) -> list[tuple[str, tuple[str, ...], tuple[str, ...], str]]:
    from pipeline.evals.problems import format_prompt
    from pipeline.evals.tasks import load_problems

    out = []
    for p in load_problems("indist", n, seed):
        steps = [*p.steps, f"Answer: {p.answer}"]
        for i, step in enumerate(steps):
            out.append((format_prompt(p), p.premises, tuple(steps[:i]), step))
            wrong = re.sub(r"(\d+)\s*$", lambda m: str(int(m.group(1)) + 1), step)
            if wrong != step:
                out.append((format_prompt(p), p.premises, tuple(steps[:i]), wrong))
    return out


def in_process(checks) -> tuple[float, list[str]]:
    from pipeline.verify.checker import check_step, clear_cache

    clear_cache()
    t0 = time.perf_counter()
    verdicts = [check_step(*c).verdict for c in checks]
    return time.perf_counter() - t0, verdicts


def fast_path(checks) -> tuple[list[float], list[str | None]]:
    """`fast_verdict` on every check: seconds each, and its verdict (None: to the checker)."""
    from pipeline.verify.checker import clear_cache
    from pipeline.verify.fast import fast_verdict

    clear_cache()  # the parsed steps too: each step read cold, as decode reads a new one
    lat, verdicts = [], []
    for _, _, _, step in checks:
        t = time.perf_counter()
        v = fast_verdict(step)
        lat.append(time.perf_counter() - t)
        verdicts.append(None if v is None else v.verdict)
    return lat, verdicts


def round_trips(checks, redis_url: str) -> list[float]:
    """Each check sent alone and its verdict awaited: seconds from send to verdict."""
    out = []
    for c in checks:
        t = time.perf_counter()
        through_celery([c], redis_url)
        out.append(time.perf_counter() - t)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def through_celery(checks, redis_url: str) -> tuple[float, list[str]]:
    import redis

    from pipeline import schema
    from pipeline.verify import tasks

    app = tasks.make_app(redis_url)
    stream = f"bench:verdicts:{uuid.uuid4().hex[:8]}"
    reqs = [
        schema.VerifyRequest(
            id="bench",
            key=str(i),
            step=len(accepted),
            text=step,
            problem=problem,
            premises=list(premises),
            accepted=list(accepted),
            reply_stream=stream,
            sent_ms=0,
        )  # fmt: skip
        for i, (problem, premises, accepted, step) in enumerate(checks)
    ]
    verdicts: dict[int, str] = {}
    with redis.Redis.from_url(redis_url) as r:
        t0 = time.perf_counter()
        for req in reqs:
            tasks.send(req, app)
        last = "0"
        while len(verdicts) < len(reqs):
            got = r.xread({stream: last}, count=1000, block=30_000)
            if not got:
                raise RuntimeError(f"only {len(verdicts)}/{len(reqs)} verdicts came back")
            for entry_id, fields in got[0][1]:
                last = entry_id
                v = schema.decode(fields[b"v"], schema.VerdictMessage)
                verdicts[int(v.key)] = v.verdict
        elapsed = time.perf_counter() - t0
        r.delete(stream)
    return elapsed, [verdicts[i] for i in range(len(reqs))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=500, help="problems whose traces are checked")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trips", type=int, default=200, help="checks timed one at a time")
    args = ap.parse_args()

    from pipeline.local.services import EmbeddedRedis

    checks = inputs(args.n, args.seed)
    embedded = None
    redis_url = os.environ.get("STEPWISE_REDIS")
    if not redis_url:
        embedded = EmbeddedRedis()
        embedded.start()
        redis_url = embedded.url
    env = {**os.environ, "STEPWISE_REDIS": redis_url, "OMP_NUM_THREADS": "1"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "worker", "verify", "--concurrency", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        through_celery(checks[:20], redis_url)  # the worker is up and its checker loaded
        fast_lat, fast_v = fast_path(checks)
        base_s, base_v = in_process(checks)
        celery_s, celery_v = through_celery(checks, redis_url)
        trips = round_trips(checks[:: max(1, len(checks) // args.trips)], redis_url)
    finally:
        worker.terminate()
        worker.wait(30)
        if embedded is not None:
            embedded.stop()
    base_rate, celery_rate = len(checks) / base_s, len(checks) / celery_s
    mismatches = sum(a != b for a, b in zip(base_v, celery_v, strict=True))
    print(f"{len(checks)} checks ({sum(v == 'contradicted' for v in base_v)} contradicted)")
    print(f"in-process check_step:        {base_rate:8.0f} checks/s")
    print(f"Celery, 1 worker process:     {celery_rate:8.0f} checks/s  "
          f"(ratio {celery_rate / base_rate:.2f}, {mismatches} verdict mismatches)")  # fmt: skip
    decided = [i for i, v in enumerate(fast_v) if v is not None]
    fast_wrong = sum(fast_v[i] != base_v[i] for i in decided)
    contradicted = sum(v == "contradicted" for v in base_v)
    print("what a verdict costs, per check (median / p99):")
    print(
        f"  fast path in decode:        {pct(fast_lat, 0.5) * 1e6:8.0f} / "
        f"{pct(fast_lat, 0.99) * 1e6:.0f} us; decides {len(decided)} of {len(checks)} checks "
        f"({len(decided)}/{contradicted} of the contradictions), {fast_wrong} unlike the checker"
    )
    print(f"  checker in process:         {1e6 / base_rate:8.0f} us (mean)")
    print(f"  Celery round trip, alone:   {pct(trips, 0.5) * 1e6:8.0f} / "
          f"{pct(trips, 0.99) * 1e6:.0f} us over {len(trips)} checks "
          f"({pct(trips, 0.5) / pct(fast_lat, 0.5):.0f}x the fast path's median)")  # fmt: skip
    report = {
        "bench": "verify_throughput",
        "checks": len(checks),
        "in_process_checks_per_s": base_rate,
        "celery_checks_per_s": celery_rate,
        "ratio": celery_rate / base_rate,
        "verdict_mismatches": mismatches,
        "fast_path_us_p50": pct(fast_lat, 0.5) * 1e6,
        "fast_path_us_p99": pct(fast_lat, 0.99) * 1e6,
        "fast_path_decided": len(decided),
        "fast_path_unlike_checker": fast_wrong,
        "contradicted": contradicted,
        "checker_us_mean": 1e6 / base_rate,
        "celery_round_trip_us_p50": pct(trips, 0.5) * 1e6,
        "celery_round_trip_us_p99": pct(trips, 0.99) * 1e6,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
