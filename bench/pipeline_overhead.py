"""Pipeline overhead: the same jobs through the engine in-process and through the full pipeline.

    python bench/pipeline_overhead.py [--n 64] [--model tiny-reasoner] [--hops 200]
                                      [--verify off|async|strict] [--full-stack]
                                      [--follow-events] [--transport shm_pool|shm|mooncake]

One run, same problems, same seeds, same sampling:
  * engine-only: `Engine` in this process, every request added at once (saturation), in
    the problems' order; after the pipeline run once more in the order the pipeline's decode
    admitted the jobs (its engine queue is FIFO), so that both sides fill their batches of 64
    from the same sequence of jobs: the steps a batch needs depend on which jobs are left for
    the tail, and this problem set's own order is an unusually good one (its long problems sit
    in its third quarter);
  * pipeline: ingest, prefill and decode worker processes on the local stack (embedded
    Kafka-compatible broker + Redis), every job published at once after a warm-up job. Jobs
    run with verify=off by default, as the engine-only side verifies nothing (--verify async
    adds the Celery verify workers); --full-stack also starts the budget controller and the
    gateway. The bench's client reads only Results unless --follow-events;
  * Kafka hop: produce -> consume latency of single records on the same broker;
  * KV handoff: bench/kv_handoff.py (the default shm_pool transport's scattered-blocks figure
    against a plain memcpy of the same bytes; SmolLM2's KV shape when it is prepared, else the
    tiny reasoner's).
Targets (issue 4): pipeline throughput >= 85% of engine-only, hop p50 < 5 ms, handoff >= 50%
of memcpy. Worker processes get one torch thread each, and so does the engine-only side
(`--threads`). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import gc
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import schema  # noqa: E402
from pipeline.bus import BusConfig  # noqa: E402
from pipeline.client import StepwiseClient  # noqa: E402
from pipeline.config import EngineConfig, PipelineConfig  # noqa: E402
from pipeline.engine import Engine, Request, SamplingParams  # noqa: E402
from pipeline.evals.tasks import load_problems  # noqa: E402
from pipeline.local import services  # noqa: E402
from pipeline.local.stack import WORKERS, Stack  # noqa: E402
from pipeline.models.resolve import resolve_model  # noqa: E402
from pipeline.telemetry import gcstats  # noqa: E402

MAX_TOKENS = 256


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def summarize(wall: float, tokens: int, finish_s: list[float]) -> dict:
    """Throughput and latency of one side; `finish_s`: seconds from t0 to each job's end."""
    lat = [t * 1000 for t in finish_s]
    return {
        "wall_s": wall,
        "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "jobs_per_s": len(finish_s) / wall,
        "p50_ms": pct(lat, 0.5),
        "p99_ms": pct(lat, 0.99),
    }


def engine_only(model: str, problems, threads: int, order: list[int] | None = None) -> dict:
    """Every job added at once, in `order` (indexes into problems; default their own order):
    the engine's queue is FIFO, so that is the order jobs enter its running batch."""
    import torch

    torch.set_num_threads(threads)
    engine = Engine(EngineConfig(model=str(resolve_model(model)), dtype="float32"))
    engine.generate(["Q: 1 + 1\n"], SamplingParams(temperature=0, max_tokens=8))  # warm-up
    # As every worker does after its setup: what start-up made is out of the collector's
    # sight, so neither side pays a full collection over the model (pipeline/telemetry/gcstats.py).
    gcstats.freeze()
    gc_stats = gcstats.GCStats().install()
    before = engine.stats.as_dict()
    t0 = time.perf_counter()
    done: dict[str, float] = {}
    seqs = []
    for i in order if order is not None else range(len(problems)):
        p = problems[i]
        ids = engine.encode_prompt([{"role": "user", "content": " ".join(p.question.split())}])
        params = SamplingParams(temperature=0.7, seed=i, max_tokens=MAX_TOKENS)
        seqs.append(engine.add(Request(f"e{i}", ids, params)))
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = time.perf_counter() - t0
    tokens = sum(s.num_output_tokens for s in seqs)
    summary = summarize(time.perf_counter() - t0, tokens, list(done.values()))
    after = engine.stats.as_dict()
    summary["engine"] = {k: after[k] - before[k] for k in after}
    gc_stats.uninstall()
    gc.unfreeze()  # a second engine-only run freezes its own start-up
    summary["gc"] = gc_stats.as_dict()
    return summary


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds of each process so far, all its threads (/proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return found


def add_cores(pids: dict[str, int]) -> None:
    """Decode's engine core, a process of its own once the worker is up, as "decode core"."""
    for name, pid in list(pids.items()):
        for child in services.spawned_children(pid):
            pids[f"{name} core"] = child


def stack_pids(stack: Stack) -> dict[str, int]:
    """The processes one pipeline run keeps busy: workers, broker, Redis, this client."""
    pids = {name: proc.pid for name, proc in stack.procs.items()}
    for service in stack.services.embedded:
        if service.pid is not None:
            pids[service.name] = service.pid
    pids["bench client"] = os.getpid()
    return pids


def worker_stats(log_dir: str, what: str = "engine") -> dict[str, dict]:
    """The totals each worker logs when it stops ({stage: stats}; `what`: "engine" for the
    engine workers' model time, "gc" for every worker's collector pauses, "core_gc" for decode's
    engine core process), from its log."""
    found = {}
    for path in Path(log_dir).glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if f" {what}: {{" in line:
                found[path.stem] = ast.literal_eval(line.split(f" {what}: ", 1)[1])
    return found


def engine_line(name: str, st: dict) -> str:
    steps = max(1, st["num_steps"])
    return (
        f"  {name:<14}{st['num_steps']:>6} steps {st['forward_s']:>7.2f} s forward "
        f"({st.get('forward_cpu_s', 0.0):.2f} s on its CPU) "
        f"({1000 * st['forward_s'] / steps:5.1f} ms/step, "
        f"{st['num_decode_tokens'] / steps:5.1f} decode tokens/step, "
        f"{st['num_prefill_tokens']} prefill tokens)"
    )


async def pipeline_run(
    kafka: str, prefix: str, problems, verify: str, events: bool, pids: dict[str, int]
) -> dict:
    async with StepwiseClient(kafka, prefix, events=events) as client:
        # Warm-up in the run's verify mode: a verified job here would wait out its verdict
        # timeout when no verify worker runs.
        warm = schema.Job(
            id=f"warm-{uuid.uuid4().hex[:6]}",
            prompt="1 + 1",
            params=schema.JobParams(verify=verify),
        )
        await client.submit(warm)
        async for _ in client.follow({warm.id}, timeout_s=300):
            pass
        tag = uuid.uuid4().hex[:6]
        jobs = [
            schema.Job(
                id=f"bench-{tag}-{i}",
                prompt=" ".join(p.question.split()),
                params=schema.JobParams(
                    temperature=0.7, seed=i, max_tokens=MAX_TOKENS, verify=verify
                ),
                created_ms=int(time.time() * 1000),
            )
            for i, p in enumerate(problems)
        ]
        add_cores(pids)  # up by now: the warm-up job went through
        cpu0 = cpu_seconds(pids)
        t0 = time.perf_counter()
        await client.submit_many(jobs)  # all at once, as the engine-only side adds them
        results = {}
        async for msg in client.follow({j.id for j in jobs}, timeout_s=1200, grace_s=0):
            if isinstance(msg, schema.Result):
                results[msg.id] = (msg, time.perf_counter() - t0)
        wall = max(t for _, t in results.values())
        cpu1 = cpu_seconds(pids)
    tokens = sum(r.usage.completion_tokens for r, _ in results.values())
    summary = summarize(wall, tokens, [t for _, t in results.values()])
    summary["ok"] = sum(r.status == "ok" for r, _ in results.values())
    # The order decode started the jobs in (its engine admits them FIFO): a Result's time
    # less its decode stage.
    index = {j.id: i for i, j in enumerate(jobs)}
    started = {
        index[r.id]: r.ts_ms - r.timings.stages.get("decode", 0) for r, _ in results.values()
    }
    summary["decode_order"] = sorted(started, key=lambda i: (started[i], i))
    # Cores each process kept busy over the run (CPU seconds / wall; two cores here).
    summary["cores"] = {k: (cpu1[k] - cpu0[k]) / wall for k in cpu1 if k in cpu0}
    # All of it: what the pipeline cost in CPU, a steadier figure than throughput on a shared
    # machine (bench/tracing_overhead.py reads it).
    summary["cpu_s"] = sum(cpu1[k] - cpu0[k] for k in cpu1 if k in cpu0)
    return summary


async def hop_latency(kafka: str, n: int) -> dict:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from pipeline.local.services import create_topics

    topic = f"bench-hop-{uuid.uuid4().hex[:6]}"
    await create_topics(kafka, [topic], 1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all")
    wait = BusConfig(bootstrap_servers=kafka).fetch_max_wait_ms  # what the workers use
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka, fetch_max_wait_ms=wait)
    await producer.start()
    await consumer.start()
    await consumer.seek_to_end()
    lat = []
    try:
        for i in range(n):
            t = time.perf_counter()
            await producer.send_and_wait(topic, str(i).encode())
            while True:
                batch = await consumer.getmany(timeout_ms=1000)
                if any(batch.values()):
                    break
            lat.append((time.perf_counter() - t) * 1000)
    finally:
        await consumer.stop()
        await producer.stop()
    return {"p50_ms": statistics.median(lat), "p95_ms": pct(lat, 0.95)}


def handoff(threads: int) -> dict:
    import subprocess

    model = "smollm2"
    try:
        resolve_model(model, prepare=False)
    except Exception:
        model = "tiny-reasoner"
    out = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "kv_handoff.py"), "--model", model,
         "--threads", str(threads)],
        capture_output=True, text=True,
    )  # fmt: skip
    print(out.stdout.rstrip())
    if out.returncode != 0:  # the pipeline's figures still print (the first GPU run lost them)
        tail = out.stderr.strip().splitlines()[-1:] or [f"exit {out.returncode}"]
        print(f"KV handoff bench failed: {tail[0]}", file=sys.stderr)
        return {"handoff_vs_memcpy": None, "error": tail[0]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--model", default="tiny-reasoner")
    # One torch thread per process on both sides: with two cores and a shared machine, two
    # OpenMP threads per process mostly wait on each other (measured: 3-5x slower under load).
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hops", type=int, default=200)
    # The engine-only side verifies nothing, so by default neither does the pipeline: the
    # ratio is the cost of the pipeline, not of Z3 (bench/verify_quality.py measures that).
    ap.add_argument("--verify", choices=["off", "async", "strict"], default="off")
    # The stages a job passes through; --full-stack adds the budget controller (which cuts
    # thinking budgets when saturation breaks the SLO: then the two sides do different work)
    # and the gateway, which idle here but share the two cores.
    ap.add_argument("--full-stack", action="store_true")
    # The client that drives saturation reads Results, as a batch client would (the engine-only
    # side streams nothing either); decode publishes every event all the same. --follow-events
    # makes it read the events too (one more process fetching the busiest topic).
    ap.add_argument("--follow-events", action="store_true")
    # The KV handoff's transport in the stack (decode forced to it: `mooncake` reads the blocks
    # over Mooncake's TCP transfer engine although both sides share this host).
    ap.add_argument("--transport", choices=["shm_pool", "shm", "mooncake"], default=None)
    args = ap.parse_args()
    if args.transport:  # before the settings are read: every worker takes it from there
        os.environ["STEPWISE_KV_TRANSPORT"] = args.transport
    problems = load_problems("indist", args.n, args.seed)
    load0 = os.getloadavg()[0]

    print(f"engine-only: {args.n} jobs ...", flush=True)
    eng = engine_only(args.model, problems, args.threads)
    os.environ["OMP_NUM_THREADS"] = "1"  # worker processes: one torch thread each
    config = PipelineConfig.from_settings(model=args.model, dtype="float32")
    print(f"pipeline: {args.n} jobs (verify={args.verify}) ...", flush=True)
    import tempfile

    workers = ("ingest", "prefill", "decode") + (("verify",) if args.verify != "off" else ())
    if args.full_stack:
        workers = WORKERS
    log_dir = tempfile.mkdtemp(prefix="bench-pipeline-")
    print(f"pipeline workers: {', '.join(workers)}", flush=True)
    with Stack(config, workers=workers, log_dir=log_dir) as stack:
        kafka = stack.services.bootstrap_servers
        pids = stack_pids(stack)
        run = pipeline_run(
            kafka, config.topic_prefix, problems, args.verify, args.follow_events, pids
        )
        pipe = asyncio.run(stack.guard(run))  # a worker that dies fails the run at once
        hop = asyncio.run(hop_latency(kafka, args.hops))
    # After the stack stopped: each engine worker logs its totals (warm-up job included).
    workers_engine = worker_stats(log_dir)
    workers_gc = worker_stats(log_dir, "gc")
    workers_gc |= {f"{k} core": v for k, v in worker_stats(log_dir, "core_gc").items()}
    ho = handoff(args.threads)

    # The same jobs again in-process, admitted in the order decode admitted them: how many
    # steps a batch of 64 needs depends on that order (which jobs are left for the tail), and
    # the pipeline's order is not the problems' own.
    print("engine-only, in the pipeline's admission order ...", flush=True)
    eng_same = engine_only(args.model, problems, args.threads, pipe["decode_order"])
    ratio = pipe["tokens_per_s"] / eng["tokens_per_s"]
    ratio_same = pipe["tokens_per_s"] / eng_same["tokens_per_s"]
    print(f"\n{'':<14}{'tokens/s':>10}{'jobs/s':>9}{'p50 ms':>10}{'p99 ms':>10}{'tokens':>8}")
    rows = (("engine-only", eng), ("  same order", eng_same), ("pipeline", pipe))
    for name, r in rows:
        print(
            f"{name:<14}{r['tokens_per_s']:>10.1f}{r['jobs_per_s']:>9.2f}"
            f"{r['p50_ms']:>10.0f}{r['p99_ms']:>10.0f}{r['tokens']:>8}"
        )
    print("where the model's time went (engine totals):")
    print(engine_line("engine-only", eng["engine"]))
    print(engine_line("  same order", eng_same["engine"]))
    for stage, st in sorted(workers_engine.items()):
        print(engine_line(stage, st))
    busy = ", ".join(f"{k} {v:.2f}" for k, v in sorted(pipe["cores"].items(), key=lambda x: -x[1]))
    print(f"cores busy during the pipeline run: {busy} (of {os.cpu_count()})")
    pauses = [("engine-only", eng["gc"]), ("  same order", eng_same["gc"])]
    pauses += sorted(workers_gc.items())
    print(
        "full collections (gen 2), whole life for the workers: "
        + ", ".join(f"{name.strip()} {g['gen2_count']} ({g['gen2_s']:.3f} s)" for name, g in pauses)
    )
    print(f"pipeline / engine throughput: {ratio:.2f}  (target >= 0.85)")
    print(f"pipeline / engine throughput, same admission order: {ratio_same:.2f}")
    print(f"Kafka hop p50 {hop['p50_ms']:.2f} ms, p95 {hop['p95_ms']:.2f} ms  (target p50 < 5)")
    if ho["handoff_vs_memcpy"] is None:
        print(f"KV handoff vs memcpy: not measured ({ho['error']})")
    else:
        print(f"KV handoff vs memcpy: {ho['handoff_vs_memcpy']:.2f}  (target >= 0.5)")
    print(
        json.dumps(
            {
                "bench": "pipeline_overhead",
                "n": args.n,
                "verify": args.verify,
                "workers": list(workers),
                "client_follows_events": args.follow_events,
                "engine_tokens_per_s": round(eng["tokens_per_s"], 2),
                "pipeline_tokens_per_s": round(pipe["tokens_per_s"], 2),
                "throughput_ratio": round(ratio, 3),
                "engine_same_order_tokens_per_s": round(eng_same["tokens_per_s"], 2),
                "throughput_ratio_same_order": round(ratio_same, 3),
                "engine_p50_ms": round(eng["p50_ms"]),
                "engine_p99_ms": round(eng["p99_ms"]),
                "pipeline_p50_ms": round(pipe["p50_ms"]),
                "pipeline_p99_ms": round(pipe["p99_ms"]),
                "hop_p50_ms": round(hop["p50_ms"], 2),
                "handoff_vs_memcpy": ho["handoff_vs_memcpy"],
                "pipeline_ok": pipe["ok"],
                "transport": config.kv_transport,
                "pipeline_wall_s": round(pipe["wall_s"], 2),
                "pipeline_cpu_s": round(pipe["cpu_s"], 2),
                "engine_forward_s": round(eng["engine"]["forward_s"], 2),
                "worker_forward_s": {
                    k: round(v["forward_s"], 2) for k, v in sorted(workers_engine.items())
                },
                "pipeline_cores_busy": {k: round(v, 2) for k, v in pipe["cores"].items()},
                "gc_gen2_s": {
                    "engine": eng["gc"]["gen2_s"],
                    **{k: v["gen2_s"] for k, v in sorted(workers_gc.items())},
                },
                "load_avg_start": round(load0, 2),
                "load_avg_end": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
