"""Gateway under load: concurrent WebSocket clients on loopback, against a direct Kafka consumer.

    python bench/gateway_load.py --source synthetic --clients 200 --rate 2000 --duration-s 20
    python bench/gateway_load.py --source stack --clients 200 --duration-s 30

Both start a local stack (embedded broker + Redis, topics, the gateway as its own process,
`stepwise worker gateway`) and `--clients` WebSocket clients in this process
(pipeline.client.GatewayClient, which resumes from the next seq after a 4008 close).

* `synthetic`: a publisher process writes Events to `{prefix}events` at `--rate` events/s,
  round-robin over one job per client, each stamped `ts_ms` as it is published (as decode stamps
  its events right before publishing), then a `final` event and a Result per job. What is
  measured is the gateway's path (Kafka feed -> hub -> WebSocket -> client), not decode: on two
  cores the tiny reasoner cannot emit events fast enough to load the gateway.
* `stack`: the real pipeline too (ingest, prefill, decode, verify workers; tiny reasoner); every
  client submits jobs (`stream: tokens`) back to back through the WebSocket for `--duration-s`.

Baseline, same run, same events: a plain aiokafka consumer in its own process reading
`{prefix}events` from the end (what a client reading Kafka directly gets). Latency = receive
time - Event.ts_ms (decode's emit stamp; millisecond resolution, one host clock). Loss and
duplication: each job's events must arrive with seqs 0..n-1, each once (the client counts and
drops a duplicate a resume replays). The last line is one JSON object with the figures and the
gateway/baseline ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.local.stack import gateway_healthy  # noqa: E402

EVENT_TEXT = " 17 + 25 = 42"  # a token-sized payload


def now_ms() -> float:
    return time.time() * 1000.0


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


# -- the baseline: a direct Kafka consumer, in its own process ---------------------------------


def kafka_probe(bootstrap: str, prefix: str, ready, stop, conn) -> None:
    asyncio.run(_kafka_probe(bootstrap, prefix, ready, stop, conn))


async def _kafka_probe(bootstrap: str, prefix: str, ready, stop, conn) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from pipeline import schema
    from pipeline.bus import BusConfig
    from pipeline.topics import Topics

    topic = Topics(prefix).events
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False,
        fetch_max_wait_ms=BusConfig(bootstrap).fetch_max_wait_ms,  # as the gateway's feed
    )  # fmt: skip
    await consumer.start()
    await consumer._client.force_metadata_update()  # noqa: SLF001
    parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or {0}]
    consumer.assign(parts)
    await consumer.seek_to_end(*parts)
    for tp in parts:
        await consumer.position(tp)
    ready.set()
    latencies: list[float] = []
    seqs: dict[str, list[int]] = {}
    first = last = None
    idle_since = time.monotonic()
    while not (stop.is_set() and time.monotonic() - idle_since > 1.0):
        batch = await consumer.getmany(timeout_ms=100)
        t = now_ms()
        for records in batch.values():
            for r in records:
                e = schema.decode(r.value, schema.Event)
                latencies.append(t - e.ts_ms)
                seqs.setdefault(e.id, []).append(e.seq)
                first, last = first or t, t
        if batch:
            idle_since = time.monotonic()
    await consumer.stop()
    conn.send({"latencies": latencies, "seqs": seqs, "first_ms": first, "last_ms": last})
    conn.close()


# -- synthetic events, in their own process ----------------------------------------------------


def publisher(bootstrap: str, prefix: str, job_ids, rate, duration_s, conn) -> None:
    asyncio.run(_publish(bootstrap, prefix, job_ids, rate, duration_s, conn))


async def _publish(bootstrap, prefix, job_ids, rate, duration_s, conn) -> None:
    from pipeline import schema
    from pipeline.bus import BusConfig, Producer
    from pipeline.topics import Topics

    topics = Topics(prefix)
    producer = Producer(BusConfig(bootstrap, client_id="bench-publisher"))
    await producer.start()
    counts = dict.fromkeys(job_ids, 0)
    t0, sent, tick = time.monotonic(), 0, 0.005
    while (elapsed := time.monotonic() - t0) < duration_s:
        due = int(rate * elapsed) - sent
        batch = []
        ts = int(now_ms())
        for i in range(due):
            job = job_ids[(sent + i) % len(job_ids)]
            e = schema.Event(id=job, seq=counts[job], kind="token", text=EVENT_TEXT, ts_ms=ts)
            counts[job] += 1
            batch.append((topics.events, job, schema.encode(e)))
        if batch:
            await producer.send_many(batch)
            sent += len(batch)
        await asyncio.sleep(tick)
    ts = int(now_ms())
    ends = []
    for job in job_ids:
        final = schema.Event(id=job, seq=counts[job], kind="final", text="42", ts_ms=ts)
        counts[job] += 1
        result = schema.Result(id=job, status="ok", answer="42", ts_ms=ts)
        ends += [(topics.events, job, schema.encode(final))]
        ends += [(topics.results, job, schema.encode(result))]
    await producer.send_many(ends)
    await producer.stop()
    conn.send({"counts": counts, "published_s": time.monotonic() - t0})
    conn.close()


# -- the clients -------------------------------------------------------------------------------


class Tally:
    """What the WebSocket clients received."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.seqs: dict[str, list[int]] = {}
        self.finished: set[str] = set()
        self.opened = 0
        self.errors: list[str] = []
        self.last_ms: float | None = None
        self.num_cached = 0

    def take(self, item) -> None:
        from pipeline import schema

        if isinstance(item, schema.Result):
            self.finished.add(item.id)
            self.num_cached += item.status == "cached"  # answer-cache hits: accepted + final
            return
        t = self.last_ms = now_ms()
        self.latencies.append(t - item.ts_ms)
        self.seqs.setdefault(item.id, []).append(item.seq)

    def on_open(self) -> None:
        self.opened += 1


async def follow_jobs(url: str, job_ids: list[str], tally: Tally, clients: list):
    """One client per job id, subscribed before anything is published."""
    from pipeline.client import GatewayClient

    async def one(job_id: str) -> None:
        client = GatewayClient(url)
        clients.append(client)
        try:
            async for item in client.stream(job_id=job_id, on_open=tally.on_open):
                tally.take(item)
        except Exception as exc:  # counted: a client that broke is a finding
            tally.errors.append(f"{job_id}: {exc!r}")

    return [asyncio.create_task(one(j)) for j in job_ids]


async def submit_jobs(url: str, n: int, duration_s: float, tally: Tally, clients: list):
    """`n` clients, each submitting jobs back to back for `duration_s`."""
    from pipeline.client import GatewayClient

    end = time.monotonic() + duration_s
    run = uuid.uuid4().hex[:6]  # job ids are idempotency keys: never reuse one across runs

    async def one(i: int) -> None:
        client = GatewayClient(url)
        clients.append(client)
        k = 0
        while time.monotonic() < end:
            a, b = 3 + (7 * i + k) % 40, 2 + (11 * k + i) % 30
            job = {
                "id": f"load-{run}-{i}-{k}",
                "prompt": f"What is {a} + {b}?",
                "params": {"stream": "tokens", "max_tokens": 64, "temperature": 0.7, "seed": k},
            }
            k += 1
            try:
                async for item in client.stream(job):
                    tally.take(item)
            except Exception as exc:
                tally.errors.append(f"{job['id']}: {exc!r}")

    return [asyncio.create_task(one(i)) for i in range(n)]


# -- figures -----------------------------------------------------------------------------------


def check_seqs(seqs: dict[str, list[int]], expected: dict[str, int] | None) -> dict:
    """Lost, duplicated and out-of-order events per job: seqs must be 0..n-1, each once."""
    lost = dup = disorder = 0
    for job, got in seqs.items():
        unique = set(got)
        dup += len(got) - len(unique)
        disorder += sum(1 for a, b in zip(got, got[1:], strict=False) if b <= a)
        n = expected[job] if expected is not None else max(unique) + 1
        lost += n - len(unique & set(range(n)))
    if expected is not None:  # jobs that got nothing at all
        lost += sum(n for job, n in expected.items() if job not in seqs)
    return {"lost": lost, "duplicates": dup, "out_of_order": disorder}


def figures(latencies, seqs, expected, t0_ms, last_ms) -> dict:
    """`t0_ms`: when publishing (or submitting) began; `last_ms`: the last event received."""
    n = len(latencies)
    window_s = max(1e-3, ((last_ms or t0_ms) - t0_ms) / 1000)
    return {
        "events": n,
        "events_per_s": round(n / window_s, 1),
        "window_s": round(window_s, 2),
        "p50_ms": pct(latencies, 0.50),
        "p99_ms": pct(latencies, 0.99),
        "max_ms": round(max(latencies), 1) if latencies else None,
        **check_seqs(seqs, expected),
    }


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_healthy(port: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not gateway_healthy(port):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gateway on {port} did not get healthy in {timeout_s} s")
        time.sleep(0.3)


async def run_load(args, bootstrap: str, prefix: str, port: int, gateway_pid: int) -> dict:
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    probe_rx, probe_tx = ctx.Pipe(duplex=False)
    probe = ctx.Process(target=kafka_probe, args=(bootstrap, prefix, ready, stop, probe_tx))
    probe.start()
    while not ready.is_set():
        await asyncio.sleep(0.05)
    url = f"ws://127.0.0.1:{port}"
    tally, clients = Tally(), []
    expected = None
    t0, t0_ms = time.monotonic(), now_ms()
    cpu0, client_cpu0 = cpu_s(gateway_pid), time.process_time()
    if args.source == "synthetic":
        run = uuid.uuid4().hex[:6]
        job_ids = [f"load-{run}-{i}" for i in range(args.clients)]
        tasks = await follow_jobs(url, job_ids, tally, clients)
        while tally.opened < len(job_ids):
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # every subscription is in the gateway's hub
        pub_rx, pub_tx = ctx.Pipe(duplex=False)
        pub = ctx.Process(
            target=publisher,
            args=(bootstrap, prefix, job_ids, args.rate, args.duration_s, pub_tx),
        )
        t0, t0_ms = time.monotonic(), now_ms()
        cpu0, client_cpu0 = cpu_s(gateway_pid), time.process_time()
        pub.start()
        while not pub_rx.poll():
            await asyncio.sleep(0.1)
        published = pub_rx.recv()
        pub.join()
        expected = published["counts"]
    else:
        tasks = await submit_jobs(url, args.clients, args.duration_s, tally, clients)
    _, pending = await asyncio.wait(tasks, timeout=args.duration_s + args.drain_s + 5)
    gateway_cpu_s = cpu_s(gateway_pid) - cpu0
    client_cpu_s = time.process_time() - client_cpu0
    for t in pending:
        t.cancel()
    stop.set()
    while not probe_rx.poll():
        await asyncio.sleep(0.1)
    base = probe_rx.recv()
    probe.join()
    if expected is None:  # stack: a finished job has seqs 0..its final event's, once each
        seen = base["seqs"]
        expected = {j: max(seen.get(j, []) + tally.seqs.get(j, [-1])) + 1 for j in tally.finished}
        gw_seqs = {j: s for j, s in tally.seqs.items() if j in tally.finished}
    else:
        gw_seqs = tally.seqs
    gw = figures(tally.latencies, gw_seqs, expected, t0_ms, tally.last_ms)
    gw["jobs_finished"] = len(tally.finished)
    gw["jobs_cached"] = tally.num_cached
    gw["resumes"] = sum(c.num_resumes for c in clients)
    gw["duplicates_dropped_by_client"] = sum(c.num_duplicates for c in clients)
    gw["client_errors"] = len(tally.errors)
    gw["gateway_cpu_s"] = round(gateway_cpu_s, 2)
    gw["gateway_cpu_us_per_event"] = round(1e6 * gateway_cpu_s / max(1, gw["events"]), 1)
    gw["clients_cpu_s"] = round(client_cpu_s, 2)  # this process: every client, one core at most
    direct_seqs = {j: s for j, s in base["seqs"].items() if j in expected}
    direct = figures(base["latencies"], direct_seqs, expected, t0_ms, base["last_ms"])
    if tally.errors:
        print("client errors (first 5):", *tally.errors[:5], sep="\n  ")
    return {"gateway": gw, "kafka_direct": direct, "elapsed_s": round(time.monotonic() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--source", choices=("synthetic", "stack"), default="synthetic")
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--rate", type=float, default=2000.0, help="synthetic: events/s in all")
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--drain-s", type=float, default=30.0, help="stack: wait for jobs in flight")
    ap.add_argument(
        "--ws-deflate", action="store_true", help="gateway with permessage-deflate on (default off)"
    )
    args = ap.parse_args()

    from pipeline.config import PipelineConfig
    from pipeline.local.services import free_port
    from pipeline.local.stack import Stack

    for name in ("STEPWISE_KAFKA", "STEPWISE_REDIS"):
        os.environ.pop(name, None)  # fresh embedded services
    port = free_port()
    os.environ.update(STEPWISE_GATEWAY_PORT=str(port), STEPWISE_GATEWAY_HOST="127.0.0.1")
    os.environ["STEPWISE_WS_DEFLATE"] = "1" if args.ws_deflate else "0"
    workers = ("gateway",) if args.source == "synthetic" else (
        "ingest", "prefill", "decode", "verify", "gateway",
    )  # fmt: skip
    log_dir = tempfile.mkdtemp(prefix="gateway-load-")
    config = PipelineConfig.from_settings(model="tiny-reasoner", dtype="float32")
    started = time.time()
    with Stack(config, workers=workers, log_dir=log_dir) as stack:
        wait_healthy(port)
        where = (stack.services.bootstrap_servers, config.topic_prefix, port)
        where += (stack.procs["gateway"].pid,)
        if args.source == "stack":  # one job end to end first: every worker is past start-up
            warm = argparse.Namespace(**{**vars(args), "clients": 1, "duration_s": 0.1})
            asyncio.run(run_load(warm, *where))
        out = asyncio.run(run_load(args, *where))
    gw, direct = out["gateway"], out["kafka_direct"]
    what = (
        f"synthetic events at {args.rate:g}/s (publisher process; decode not involved)"
        if args.source == "synthetic"
        else "the real stack: tiny reasoner, jobs with stream=tokens"
    )
    print(f"\ngateway load: {args.clients} WebSocket clients, {what}; {out['elapsed_s']} s")
    print(f"machine: {os.cpu_count()} CPUs; logs {log_dir}")
    print(f"{'path':<22}{'events':>9}{'events/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
          f"{'lost':>6}{'dup':>5}{'disorder':>9}")  # fmt: skip
    for name, f in (("gateway (WebSocket)", gw), ("kafka direct (base)", direct)):
        print(
            f"{name:<22}{f['events']:>9}{f['events_per_s']:>10}{f['p50_ms']!s:>9}"
            f"{f['p99_ms']!s:>9}{f['max_ms']!s:>9}{f['lost']:>6}{f['duplicates']:>5}"
            f"{f['out_of_order']:>9}"
        )
    print(
        f"jobs finished {gw['jobs_finished']} ({gw['jobs_cached']} cached), "
        f"resumes {gw['resumes']}, duplicates dropped by "
        f"clients {gw['duplicates_dropped_by_client']}, client errors {gw['client_errors']}; "
        f"gateway CPU {gw['gateway_cpu_s']} s ({gw['gateway_cpu_us_per_event']} us/event), "
        f"clients' CPU {gw['clients_cpu_s']} s"
    )

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    ratios = {
        "events_per_s": ratio(gw["events_per_s"], direct["events_per_s"]),
        "p50_latency": ratio(gw["p50_ms"], direct["p50_ms"]),
        "p99_latency": ratio(gw["p99_ms"], direct["p99_ms"]),
    }
    print(f"gateway / direct: {ratios}")
    line = {
        "bench": "gateway_load",
        "source": args.source,
        "clients": args.clients,
        "rate": args.rate if args.source == "synthetic" else None,
        "duration_s": args.duration_s,
        "ws_deflate": args.ws_deflate,
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
        "no_loss_no_dup": gw["lost"] == 0 and gw["duplicates"] == 0 and gw["out_of_order"] == 0,
        **out,
        "ratios": ratios,
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
