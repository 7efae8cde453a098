"""The reasoning state machine: verdicts, backtracks, retries, giving up, timeouts (no engine)."""

import pytest

from pipeline.decode.reasoning import (
    Check,
    Finish,
    Note,
    Reasoner,
    ReasoningConfig,
    Resume,
    Rollback,
    reseed,
)


def machine(verify="async", **kw) -> Reasoner:
    return Reasoner(ReasoningConfig(verify=verify, **kw), seed=42)


def only(actions, kind, note=None):
    return [a for a in actions if isinstance(a, kind) and (note is None or a.kind == note)]


def add_step(r: Reasoner, start: int, text: str, now: float = 0.0):
    """A step of len(text) tokens starting at `start`; returns (actions, key)."""
    actions = r.on_step(start, start + len(text), text, now)
    return actions, r.chain[-1].key


def test_off_keeps_steps_unverified_and_finishes_at_once():
    r = machine("off")
    actions, _ = add_step(r, 10, "1 + 1 = 2")
    assert only(actions, Check) == [] and r.chain[0].verdict == "unverified"
    assert only(actions, Note)[0].kind == "step"
    assert r.on_finish("stop", None, 0.0) == [Finish("stop")]


def test_async_sends_each_step_with_the_chain_before_it():
    r = machine()
    a1, _ = add_step(r, 10, "3 + 4 = 7")
    a2, k2 = add_step(r, 19, "7 * 2 = 14")
    (c1,), (c2,) = only(a1, Check), only(a2, Check)
    assert c1.accepted == () and c2.accepted == ("3 + 4 = 7",) and c2.key == k2


def test_a_held_finish_waits_for_every_pending_verdict():
    r = machine()
    _, k1 = add_step(r, 10, "3 + 4 = 7")
    _, k2 = add_step(r, 19, "Answer: 7")
    assert only(r.on_finish("stop", None, 0.0), Finish) == []
    assert only(r.on_verdict(k2, "no_claim", "", 0.1), Finish) == []
    acts = r.on_verdict(k1, "entailed", "", 0.2)
    assert acts[-1] == Finish("stop") and r.finished
    assert [s.verdict for s in r.chain] == ["entailed", "no_claim"]


def test_a_contradiction_rolls_back_to_the_step_start_and_drops_later_steps():
    r = machine()
    add_step(r, 10, "3 + 4 = 7")
    _, bad = add_step(r, 19, "7 * 2 = 15")
    add_step(r, 29, "15 - 1 = 14")  # decoded while step 1 was being checked
    acts = r.on_verdict(bad, "contradicted", "7 * 2 = 15 is false", 0.1)
    verdict, note = only(acts, Note)
    assert verdict.kind == "verdict" and verdict.verdict == "contradicted"
    assert note.kind == "backtrack" and note.step == 1 and "is false" in note.detail
    (rb,) = only(acts, Rollback)
    assert rb.position == 19 and rb.seed == reseed(42, 1) != 42
    assert only(acts, Resume) and [s.text for s in r.chain] == ["3 + 4 = 7"]
    # The verdict of a discarded step is stale.
    assert r.on_verdict(r.chain[0].key + "x", "entailed", "", 0.2) == []


def test_stale_verdicts_for_rolled_back_attempts_are_ignored():
    r = machine()
    _, k = add_step(r, 10, "2 + 2 = 5")
    r.on_verdict(k, "contradicted", "", 0.1)
    _, k_new = add_step(r, 10, "2 + 2 = 4")
    assert k_new != k
    assert r.on_verdict(k, "contradicted", "", 0.2) == []
    assert r.chain[0].verdict is None


def test_retries_then_drop_the_previous_step_then_give_up():
    r = machine(max_retries=2)
    add_step(r, 10, "x = 3")
    for _ in range(2):
        _, k = add_step(r, 15, "y = 1")
        assert only(r.on_verdict(k, "contradicted", "", 0.0), Rollback)[0].position == 15
    _, k = add_step(r, 15, "y = 1")
    acts = r.on_verdict(k, "contradicted", "", 0.0)  # third failure: step 0 goes too
    assert only(acts, Rollback)[0].position == 10 and r.chain == []
    assert only(acts, Note, "backtrack")[0].step == 0
    add_step(r, 10, "x = 3")
    for _ in range(2):
        _, k = add_step(r, 15, "y = 1")
        r.on_verdict(k, "contradicted", "", 0.0)
    _, k = add_step(r, 15, "y = 1")
    acts = r.on_verdict(k, "contradicted", "", 0.0)  # step 0 was dropped once already
    assert r.gave_up and only(acts, Finish) == [Finish("unverified")]
    assert only(acts, Rollback)[0].position == 15 and [s.text for s in r.chain] == ["x = 3"]
    assert "giving up" in only(acts, Note, "backtrack")[0].detail


def test_the_first_step_gives_up_after_its_retries():
    r = machine(max_retries=1)
    for _ in range(2):
        _, k = add_step(r, 10, "1 = 2")
        acts = r.on_verdict(k, "contradicted", "", 0.0)
    assert r.gave_up and only(acts, Finish) == [Finish("unverified")] and r.chain == []


def test_the_backtrack_budget_caps_the_whole_job():
    r = machine(max_retries=100, max_backtracks=3)
    for _ in range(4):
        _, k = add_step(r, 10, "1 = 2")
        acts = r.on_verdict(k, "contradicted", "", 0.0)
    assert r.gave_up and r.num_backtracks == 4 and only(acts, Finish)


def test_strict_resumes_on_a_good_verdict_only_for_the_last_step():
    r = machine("strict")
    _, k = add_step(r, 10, "2 * 3 = 6")
    assert only(r.on_verdict(k, "entailed", "", 0.0), Resume)


def test_a_missing_verdict_times_out_as_unknown_and_the_job_goes_on():
    r = machine("strict", verdict_timeout_s=5.0)
    add_step(r, 10, "2 * 3 = 6", now=100.0)
    assert r.on_tick(104.0) == []
    acts = r.on_tick(105.5)
    (note,) = only(acts, Note)
    assert note.verdict == "unknown" and "timeout" in note.detail and only(acts, Resume)
    r.on_finish("stop", None, 106.0)
    assert r.finished


def test_an_unterminated_tail_is_checked_before_the_finish():
    r = machine()
    acts = r.on_finish("length", (30, 38, "Answer: 9"), 0.0)
    (check,) = only(acts, Check)
    assert not only(acts, Finish) and check.text == "Answer: 9"
    acts = r.on_verdict(check.key, "contradicted", "x = 9 is false", 0.1)
    assert only(acts, Rollback)[0].position == 30 and r.held_finish is None
    assert not r.finished


def test_seeds_of_successive_backtracks_differ():
    assert len({reseed(7, n) for n in range(1000)}) == 1000
    assert all(0 <= reseed(2**63 - 1, n) < 2**63 for n in range(10))


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="verify mode"):
        ReasoningConfig(verify="sometimes")
    with pytest.raises(ValueError):
        ReasoningConfig(verdict_timeout_s=0)
