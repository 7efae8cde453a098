"""The gateway's memory of live jobs: per job id the ordered Events seen, the Result, the owner
tenant, and the subscribers that receive new events. Pure asyncio, no Kafka: the feed
(feed.py) calls `add_event` / `add_result`, the WebSocket and OpenAI handlers subscribe.

Events are kept in `seq` order without gaps or duplicates (a redelivered seq is dropped), so a
subscriber that resumes `from_seq` gets exactly the events it missed. Retention is bounded:
`max_jobs` logs (the oldest without subscribers go first) and `max_events_per_job` events each.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator

from pipeline import schema

Item = schema.Event | schema.Result
HAS_FINAL = ("ok", "cached")  # Result statuses whose job also publishes a `final` event


class SlowConsumer(Exception):
    """A subscriber fell more than its queue bound behind the live events."""


class EventsUnavailable(Exception):
    """The requested `from_seq` is older than the first event this gateway kept."""

    def __init__(self, first_seq: int):
        super().__init__(f"events before seq {first_seq} are not available here")
        self.first_seq = first_seq


class Subscription:
    """One subscriber's view of a job: replayed events first, then live ones, then the Result."""

    def __init__(self, job_id: str, max_queue: int):
        self.job_id = job_id
        self.max_queue = max_queue
        self.pending: deque[Item] = deque()
        self.num_replay = 0  # replayed items at the front of `pending`: not live backlog
        self.overflowed = False
        self.dropped = asyncio.Event()  # set on overflow, so a sender blocked on I/O can quit
        self._wake = asyncio.Event()

    def offer(self, item: Item, replay: bool = False) -> None:
        if self.overflowed:
            return
        if not replay and len(self.pending) - self.num_replay >= self.max_queue:
            self.overflowed = True  # the job goes on; only this subscriber is dropped
            self.pending.clear()
            self.dropped.set()
        else:
            self.pending.append(item)
            self.num_replay += replay
        self._wake.set()

    def _pop(self) -> Item:
        if self.num_replay:
            self.num_replay -= 1
        return self.pending.popleft()

    async def items(self, grace_s: float = 2.0) -> AsyncIterator[Item]:
        """Events in seq order, then the Result; raises SlowConsumer on overflow.

        Events and Results travel on different topics, so an ok (or cached) Result can overtake
        the last events: it is held until the `final` (or `error`) event is out, at most
        `grace_s`.
        """
        loop = asyncio.get_running_loop()
        held: schema.Result | None = None
        deadline = 0.0
        saw_end = False
        while True:
            if self.overflowed:
                raise SlowConsumer(f"more than {self.max_queue} events behind")
            if self.pending:
                item = self._pop()
                if isinstance(item, schema.Result):
                    if item.status in HAS_FINAL and not saw_end:
                        held, deadline = item, loop.time() + grace_s
                        continue
                    yield item
                    return
                yield item
                if item.kind in ("final", "error"):
                    saw_end = True
                    if held is not None:
                        yield held
                        return
                continue
            timeout = None
            if held is not None:
                timeout = deadline - loop.time()
                if timeout <= 0:
                    yield held
                    return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)


class JobLog:
    """What the gateway knows of one job."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        self.tenant: str | None = None  # owner: from the submitting key, or Result.tenant
        self.first_seq = 0  # seq of events[0]
        self.events: list[schema.Event] = []
        self.result: schema.Result | None = None
        self.subscribers: set[Subscription] = set()
        self.touched = time.monotonic()

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self.events)


class Hub:
    """Job logs by id, with bounded retention, and fan-out to subscribers."""

    def __init__(self, max_jobs: int = 10_000, max_events_per_job: int = 10_000):
        self.max_jobs = max_jobs
        self.max_events_per_job = max_events_per_job
        self.logs: OrderedDict[str, JobLog] = OrderedDict()

    def get(self, job_id: str) -> JobLog | None:
        return self.logs.get(job_id)

    def log_for(self, job_id: str) -> JobLog:
        log = self.logs.get(job_id)
        if log is None:
            log = self.logs[job_id] = JobLog(job_id)
            self._evict()
        log.touched = time.monotonic()
        self.logs.move_to_end(job_id)
        return log

    def _evict(self) -> None:
        excess = len(self.logs) - self.max_jobs
        if excess <= 0:
            return
        idle = [k for k, log in self.logs.items() if not log.subscribers]
        for job_id in idle[:excess]:  # oldest first: the dict is in last-touched order
            del self.logs[job_id]

    def add_event(self, event: schema.Event) -> None:
        log = self.log_for(event.id)
        if not log.events and log.first_seq == 0:
            log.first_seq = event.seq  # a gateway started mid-job keeps what it saw
        if event.seq < log.next_seq:
            return  # redelivered (at-least-once): already here
        log.events.append(event)
        if len(log.events) > self.max_events_per_job:
            drop = len(log.events) - self.max_events_per_job
            del log.events[:drop]
            log.first_seq += drop
        for sub in log.subscribers:
            sub.offer(event)

    def add_result(self, result: schema.Result) -> None:
        log = self.log_for(result.id)
        if log.result is not None:
            return  # one Result per job id
        log.result = result
        log.tenant = log.tenant or result.tenant
        for sub in log.subscribers:
            sub.offer(result)

    def subscribe(self, job_id: str, from_seq: int = 0, max_queue: int = 1000) -> Subscription:
        """Events with seq >= from_seq (kept ones replayed now), live ones, then the Result."""
        log = self.log_for(job_id)
        if log.events and from_seq < log.first_seq:
            raise EventsUnavailable(log.first_seq)
        sub = Subscription(job_id, max_queue)
        for event in log.events[max(0, from_seq - log.first_seq) :]:
            sub.offer(event, replay=True)
        if log.result is not None:
            sub.offer(log.result, replay=True)
        log.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        log = self.logs.get(sub.job_id)
        if log is not None:
            log.subscribers.discard(sub)
