"""The engine core's loop (pure logic, with a stand-in core): when it ticks, how credits hold
it back, and that a stop ends it; and how queued messages merge."""

from __future__ import annotations

import msgspec

from pipeline import schema
from pipeline.decode.core_serve import serve
from pipeline.decode.messages import Inward, Tick
from tests.unit import test_schema as schema_samples


class FakeCore:
    """Counts ticks; `steps_left` ticks of work per handoff, as a running batch would have."""

    def __init__(self) -> None:
        self.taken: list[Inward] = []
        self.steps_left = 0
        self.num_runs = 0
        self.ticks = 0
        self.waiting_on_io = False  # a job's KV read in the background
        self.report_due = False  # the budget controller's load report

    @property
    def wants_tick(self) -> bool:
        return self.steps_left > 0

    def take(self, msg: Inward) -> None:
        self.taken.append(msg)
        self.steps_left += 3 * len(msg.handoffs)
        self.num_runs += len(msg.handoffs)

    def tick(self) -> Tick:
        self.ticks += 1
        self.steps_left -= 1
        if self.steps_left == 0:
            self.num_runs = 0
        return Tick()


def handoff(job_id: str) -> schema.Handoff:
    return msgspec.structs.replace(schema_samples.handoff(), id=job_id)


def scripted(script: list[list[Inward]]):
    """A recv that plays `script` (one list of messages per call), then stops the loop."""
    calls: list[float] = []

    def recv(timeout: float) -> list[Inward]:
        calls.append(timeout)
        return script.pop(0) if script else [Inward(stop=True)]

    return recv, calls


def test_it_ticks_while_there_is_work_and_stops_on_stop():
    core, sent = FakeCore(), []
    recv, timeouts = scripted([[Inward(handoffs=[handoff("a")])], [], [], [], []])
    serve(core, recv, sent.append)  # type: ignore[arg-type]
    assert core.ticks == 3 and len(sent) == 3  # three steps of work, then idle
    # Idle, no runs: it waits; busy: it never waits for a message; then idle again.
    assert timeouts[:4] == [0.1, 0.0, 0.0, 0.1]


def test_credits_hold_it_back_until_ticks_are_published():
    core, sent = FakeCore(), []
    busy = Inward(handoffs=[handoff("a"), handoff("b")])  # six steps of work
    recv, _ = scripted([[busy], [], [], [], [Inward(credits=1)], [], [Inward(credits=2)], []])
    serve(core, recv, sent.append, max_unpublished=2)  # type: ignore[arg-type]
    # Two ticks, then it waits: an empty recv makes no tick while two are unpublished...
    # ...one credit lets one more out, two more let two.
    assert core.ticks == 5


def test_an_idle_core_still_ticks_for_its_load_report():
    core, sent = FakeCore(), []
    core.report_due = True  # a second has passed: the controller must see the load is gone
    recv, _ = scripted([[]])
    serve(core, recv, sent.append)  # type: ignore[arg-type]
    assert core.ticks == 1 and len(sent) == 1


def test_a_run_waiting_for_verdicts_still_ticks_when_nothing_comes():
    core = FakeCore()
    core.num_runs = 1  # a sequence paused for a verdict: nothing schedulable
    recv, timeouts = scripted([[], [Inward(credits=0)]])
    serve(core, recv, lambda t: None)  # type: ignore[arg-type]
    assert timeouts[0] == 0.05  # it waits a little (verdict timeouts must fire)...
    assert core.ticks == 1  # ...ticks once nothing came, not when a message did


def test_a_kv_read_in_the_background_is_looked_at_soon():
    core = FakeCore()
    core.waiting_on_io = True  # nothing to tick, but a job's KV is on its way
    recv, timeouts = scripted([[], []])
    serve(core, recv, lambda t: None)  # type: ignore[arg-type]
    assert timeouts[:2] == [0.002, 0.002] and core.ticks == 0  # not 0.1 s idle waits


def test_a_failing_tick_does_not_end_the_loop(monkeypatch):
    import pipeline.decode.core_serve as core_serve

    monkeypatch.setattr(core_serve.time, "sleep", lambda s: None)
    core = FakeCore()
    real_tick, failed = core.tick, []

    def tick():
        if not failed:
            failed.append(True)
            raise RuntimeError("boom")
        return real_tick()

    core.tick = tick  # type: ignore[method-assign]
    recv, _ = scripted([[Inward(handoffs=[handoff("a")])], [], [], [], []])
    sent = []
    serve(core, recv, sent.append)  # type: ignore[arg-type]
    assert failed and core.ticks == 3 and len(sent) == 3


def test_messages_merge_in_order():
    a = Inward(handoffs=[handoff("a")], credits=1)
    a.merge(Inward(handoffs=[handoff("b")], budgets={}, credits=2))
    a.merge(Inward(stop=True))
    assert [h.id for h in a.handoffs] == ["a", "b"]
    assert a.credits == 3 and a.budgets == {} and a.stop
    assert Inward().handoffs == []  # defaults are not shared between messages
