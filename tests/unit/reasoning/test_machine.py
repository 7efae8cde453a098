"""The reasoning state machine: verdicts, backtracks, retries, giving up, timeouts (no engine)."""

import pytest

from pipeline.budget.effective import JobBudget
from pipeline.reasoning.machine import (
    Check,
    ExitWith,
    Finish,
    ForceAnswer,
    Note,
    Pause,
    Probe,
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
    for n in range(2):  # each attempt wrong in its own way (a repeat: test below)
        _, k = add_step(r, 15, f"y = {n}")
        assert only(r.on_verdict(k, "contradicted", "", 0.0), Rollback)[0].position == 15
    _, k = add_step(r, 15, "y = 7")
    acts = r.on_verdict(k, "contradicted", "", 0.0)  # third failure: step 0 goes too
    assert only(acts, Rollback)[0].position == 10 and r.chain == []
    assert only(acts, Note, "backtrack")[0].step == 0
    add_step(r, 10, "x = 3")
    for n in range(2):
        _, k = add_step(r, 15, f"y = {n}")
        r.on_verdict(k, "contradicted", "", 0.0)
    _, k = add_step(r, 15, "y = 7")
    acts = r.on_verdict(k, "contradicted", "", 0.0)  # step 0 was dropped once already
    # Giving up: the bad step is cut, and once step 0's verdict is in, the answer is forced
    # after the chain that held.
    assert r.gave_up and not only(acts, Finish) and not only(acts, ForceAnswer)
    assert only(acts, Rollback)[0].position == 15 and [s.text for s in r.chain] == ["x = 3"]
    assert "giving up" in only(acts, Note, "backtrack")[0].detail
    acts = r.on_verdict(r.chain[0].key, "entailed", "", 0.0)
    assert only(acts, ForceAnswer) == [ForceAnswer(15)]
    # The forced answer line is kept unchecked, and the job finishes as unverified.
    acts = r.on_step(15, 20, "Answer: 3", 0.0)
    assert only(acts, Finish) == [Finish("unverified")] and r.stop_reason == "unverified"
    assert not [a for a in acts if isinstance(a, Check)]


def test_the_same_claim_refuted_again_drops_the_step_before_at_once():
    """A resample that states the refuted claim again was decided by the steps before it:
    the previous step goes now, not after every retry is spent on the same text."""
    from pipeline.verify.verdicts import ClaimVerdict

    wrong = (ClaimVerdict("A = 15", (14, 16), "contradicted", "", "refuted", "solution"),)

    r = machine(max_retries=8)
    add_step(r, 10, "x = 3")
    _, k = add_step(r, 15, "The answer is 15.")
    acts = r.on_verdict(k, "contradicted", "refuted", 0.0, wrong)
    assert only(acts, Rollback)[0].position == 15  # first time: the step is resampled
    _, k = add_step(r, 15, "So the answer is 15.")
    acts = r.on_verdict(k, "contradicted", "refuted", 0.0, wrong)
    assert only(acts, Rollback)[0].position == 10 and r.chain == []  # again: step 0 goes too
    assert only(acts, Note, "backtrack")[0].step == 0
    # The first step has none before it: its repeats are resampled up to max_retries.
    r = machine(max_retries=8)
    for _ in range(3):
        _, k = add_step(r, 10, "1 = 2")
        acts = r.on_verdict(k, "contradicted", "", 0.0)
        assert only(acts, Rollback)[0].position == 10 and not r.gave_up


def test_a_claim_refuted_again_after_the_step_before_was_dropped_gives_up():
    """The step before was dropped for the claim, and it comes back anyway: one resample, then
    the job gives up (measured: such answers were refuted 10-12 times in a row, then gave up),
    leaving the retries it still had unspent."""
    from pipeline.verify.verdicts import ClaimVerdict

    wrong = (ClaimVerdict("A = 15", (14, 16), "contradicted", "", "refuted", "solution"),)
    r = machine(max_retries=8)
    add_step(r, 10, "x = 3")
    for _ in range(2):  # refuted, resampled; refuted again: step 0 goes too
        _, k = add_step(r, 15, "The answer is 15.")
        acts = r.on_verdict(k, "contradicted", "refuted", 0.0, wrong)
    assert r.chain == [] and 0 in r.escalated
    add_step(r, 10, "x = 3")
    _, k = add_step(r, 15, "The answer is 15.")  # once more after the escalation: resampled
    acts = r.on_verdict(k, "contradicted", "refuted", 0.0, wrong)
    assert only(acts, Rollback)[0].position == 15 and not r.gave_up
    _, k = add_step(r, 15, "So the answer is 15.")  # and again: given up
    acts = r.on_verdict(k, "contradicted", "refuted", 0.0, wrong)
    assert r.gave_up and r.retries[1] == 2 and only(acts, Rollback)[0].position == 15
    assert "stated 'A = 15' 2 times" in only(acts, Note, "backtrack")[0].detail
    # Other claims after the escalation are resampled as before.
    r = machine(max_retries=8)
    add_step(r, 10, "x = 3")
    for value in (15, 15, 16, 17, 18):
        if not r.chain:
            add_step(r, 10, "x = 3")
        bad = (ClaimVerdict(f"A = {value}", (14, 16), "contradicted", "", "", "solution"),)
        _, k = add_step(r, 15, f"The answer is {value}.")
        acts = r.on_verdict(k, "contradicted", "refuted", 0.0, bad)
        assert only(acts, Rollback) and not r.gave_up


def test_the_first_step_gives_up_after_its_retries():
    r = machine(max_retries=1)
    for _ in range(2):
        _, k = add_step(r, 10, "1 = 2")
        acts = r.on_verdict(k, "contradicted", "", 0.0)
    assert r.gave_up and only(acts, ForceAnswer) == [ForceAnswer(0)] and r.chain == []


def test_the_backtrack_budget_caps_the_whole_job():
    r = machine(max_retries=100, max_backtracks=3)
    for _ in range(4):
        _, k = add_step(r, 10, "1 = 2")
        acts = r.on_verdict(k, "contradicted", "", 0.0)
    assert r.gave_up and r.num_backtracks == 4 and only(acts, ForceAnswer)


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


# -- budget forcing and early exit -------------------------------------------------------


def test_the_step_budget_forces_the_answer_after_the_last_allowed_step():
    r = machine("off", max_steps=2)
    add_step(r, 10, "3 + 4 = 7")
    acts, _ = add_step(r, 19, "7 * 2 = 14")
    # Unverified, nothing is cut: the answer is forced where the sequence stands.
    assert only(acts, ForceAnswer) == [ForceAnswer(None)] and only(acts, Pause)
    assert r.phase == "answer" and only(acts, Resume)
    acts = r.on_step(29, 40, "Answer: 14", 0.0)
    assert acts[-1] == Finish("budget") and r.result_stop_reason("stop") == "budget"
    assert [s.text for s in r.chain] == ["3 + 4 = 7", "7 * 2 = 14", "Answer: 14"]


def test_the_token_budget_waits_for_pending_verdicts_then_answers_from_the_chain():
    r = machine("async", max_thinking_tokens=30)
    _, k1 = add_step(r, 10, "3 + 4 = 7")
    _, k2 = add_step(r, 19, "7 * 2 = 15")
    assert r.on_tokens(29) == []
    acts = r.on_tokens(30)
    assert acts == [Pause()] and r.phase == "wait_answer"
    assert not only(r.on_verdict(k1, "entailed", "", 0.1), ForceAnswer)
    acts = r.on_verdict(k2, "contradicted", "7 * 2 = 15 is false", 0.2)
    # No budget to resample: the contradicted step goes, the answer follows step 0.
    assert only(acts, ForceAnswer) == [ForceAnswer(19)] and [s.text for s in r.chain] == [
        "3 + 4 = 7"
    ]
    # One backtrack event, one backtrack; the step is rolled out of the sequence at once.
    assert only(acts, Note, "backtrack")[0].step == 1 and r.num_backtracks == 1
    assert only(acts, Rollback)[0].position == 19


def budget(tokens=40, steps=8, cap=None, early=False, every=1) -> JobBudget:
    return JobBudget(tokens, steps, every, early, cap, "class")


def test_the_effective_budget_applies_while_the_job_thinks_and_never_after():
    r = machine("off", max_thinking_tokens=100, max_steps=8)
    r.update_budget(budget(40, 6))
    assert (r.max_thinking_tokens, r.max_steps) == (40, 6)
    # Spent: the answer is forced; a later (looser or tighter) budget changes nothing.
    r.on_tokens(41)
    assert r.phase != "think"
    r.update_budget(budget(500, 50))
    assert (r.max_thinking_tokens, r.max_steps) == (40, 6)


def test_a_capped_job_keeps_a_contradicted_step_checked_and_reported():
    r = machine("async", max_thinking_tokens=500)
    r.update_budget(budget(500, 60, cap=1))
    _, key = add_step(r, 10, "3 + 4 = 8")
    acts = r.on_verdict(key, "contradicted", "3 + 4 is 7", 0.0)
    assert only(acts, Rollback) and r.num_backtracks == 1  # the first backtrack is allowed
    _, key = add_step(r, 10, "3 + 4 = 9")
    acts = r.on_verdict(key, "contradicted", "3 + 4 is 7", 0.0)
    # The cap is spent: no rollback, the step stays in the chain, its verdict says why.
    assert not only(acts, Rollback) and r.num_backtracks == 1 and r.num_unresampled == 1
    assert [s.verdict for s in r.chain] == ["contradicted"]
    assert "kept: resampling is capped" in only(acts, Note, "verdict")[0].detail


def test_pending_verdicts_count_as_unknown_once_the_deadline_needs_the_answer():
    r = machine("async", verdict_timeout_s=10.0)
    _, key = add_step(r, 10, "3 + 4 = 7", now=0.0)
    assert r.on_tick(1.0) == []  # not overdue, no deadline
    r.verdicts_due_s = 2.0
    acts = r.on_tick(2.5)
    assert r.chain[0].verdict == "unknown"
    assert "deadline" in only(acts, Note, "verdict")[0].detail


def test_the_controller_can_turn_early_exit_on_for_a_job_that_did_not_ask():
    r = machine("off")
    assert not only(add_step(r, 10, "3 + 4 = 7")[0], Probe)
    r.update_budget(budget(500, 60, early=True, every=1))
    assert only(add_step(r, 20, "7 * 2 = 14")[0], Probe)


def test_the_answer_line_itself_is_never_cut_by_the_step_budget():
    r = machine("off", max_steps=1)
    acts, _ = add_step(r, 10, "Answer: 7")
    assert not only(acts, ForceAnswer) and r.phase == "think"


def early(verify="off", **kw):
    return machine(verify, early_exit=True, **kw)


def test_two_agreeing_probes_end_the_job_early():
    r = early(probe_agree=2)
    acts, _ = add_step(r, 10, "3 + 4 = 7")
    (p1,) = only(acts, Probe)
    acts, _ = add_step(r, 19, "7 * 2 = 14")
    (p2,) = only(acts, Probe)
    add_step(r, 29, "Check: 14 / 2 = 7")  # decoded while the probes ran
    assert r.on_probe(p1.key, " 14", 0.5, 3) == []
    acts = r.on_probe(p2.key, "14 ", 0.6, 3)
    assert only(acts, ExitWith) == [ExitWith(p2.position, p2.key)] and p2.position == 29
    assert r.stop_reason == "early_exit" and r.num_probe_tokens == 6
    assert [s.text for s in r.chain] == ["3 + 4 = 7", "7 * 2 = 14"]
    assert only(acts, Note, "backtrack")[0].step == 2  # the Check step was dropped


def test_a_confident_probe_exits_alone_but_not_before_its_steps_are_verified():
    r = early("async", probe_confidence=0.9)
    acts, k = add_step(r, 10, "3 + 4 = 7")
    (probe,) = only(acts, Probe)
    assert r.on_probe(probe.key, "7", 0.99, 2) == []  # step 0's verdict is pending
    acts, _ = add_step(r, 19, "7 * 1 = 7")
    assert only(acts, Probe)
    # The exit waits for step 0's verdict, and comes with it (it once never came).
    acts = r.on_verdict(k, "entailed", "", 0.1)
    assert only(acts, ExitWith) == [ExitWith(probe.position, probe.key)] and r.finished
    assert [s.text for s in r.chain] == ["3 + 4 = 7"]


def test_a_probe_of_a_rolled_back_step_is_ignored():
    r = early("async", probe_confidence=0.0)
    acts, k = add_step(r, 10, "3 + 4 = 8")
    (probe,) = only(acts, Probe)
    r.on_verdict(k, "contradicted", "", 0.1)
    assert r.on_probe(probe.key, "8", 1.0, 2) == [] and r.num_probe_tokens == 2


def test_confidence_alone_ends_nothing_by_default():
    r = early(probe_agree=2)
    acts, _ = add_step(r, 10, "3 + 4 = 7")
    (probe,) = only(acts, Probe)
    assert r.on_probe(probe.key, "7", 1.0, 2) == [] and not r.finished


@pytest.mark.parametrize(
    ("text", "claim", "kind", "char"),
    [
        ("So 27 * 5 * 10 = 145 * 10 = 1450", "27 * 5 * 10 = 145 * 10", "arithmetic", 17),
        ("Then $36 \\times 4 = 132$ cm", "36 \\times 4 = 132", "arithmetic", 20),
        ("Check: 3 < 2 holds", "3 < 2", "arithmetic", 7),  # no value: the claim's start
        ("Also 2(x + 1) = 2x + 1 here", "2(x + 1) = 2x + 1", "identity", 5),
    ],
)
def test_a_claim_is_resampled_from_its_wrong_value_or_else_its_start(text, claim, kind, char):
    from pipeline.verify.verdicts import ClaimVerdict

    at = text.index(claim)
    bad = (ClaimVerdict(claim, (at, at + len(claim)), "contradicted", "", "false", kind),)
    r = machine()
    (rb,) = only(r.on_false_claim(15, 25, text, "false", bad, 0.0), Rollback)
    assert rb.claim_char == char and text[char:].startswith(claim[char - at :])


def test_a_false_claim_mid_step_is_backtracked_from_its_claim_unless_capped():
    from pipeline.verify.verdicts import ClaimVerdict

    claim = (ClaimVerdict("88 * 40 = 3120", (4, 18), "contradicted", "", "false", "arithmetic"),)
    r = machine()
    add_step(r, 10, "x = 3")
    acts = r.on_false_claim(15, 25, "Now 88 * 40 = 3120 and", "false", claim, 0.0)
    (rb,) = only(acts, Rollback)
    # The step's start, then the character its wrong value begins at: the expression is kept.
    assert rb.position == 15 and rb.claim_char == 14
    assert only(acts, Note, "backtrack")[0].step == 1 and r.num_backtracks == 1
    assert [s.text for s in r.chain] == ["x = 3"]  # never a step of the chain
    capped = machine()
    capped.resample_cap = 0  # under load: kept, and its verdict at the step's end says it
    assert capped.on_false_claim(15, 25, "Now 88 * 40 = 3120", "false", claim, 0.0) == []


def test_a_mid_step_rollback_is_not_a_check_of_the_coverage_report():
    """The report's checks are the verdict events a client got; a claim rolled back mid-step
    has a backtrack event only."""
    from pipeline.verify.verdicts import ClaimVerdict

    claim = (ClaimVerdict("7 * 8 = 54", (0, 10), "contradicted", "", "false", "arithmetic"),)
    r = machine()
    acts = r.on_false_claim(10, 16, "7 * 8 = 54 so", "false", claim, 0.0)
    assert only(acts, Note, "backtrack") and not only(acts, Note, "verdict")
    assert r.coverage() == machine().coverage()


@pytest.mark.parametrize(
    "call",
    [
        '<tool_call>\n{"name": "calc", "arguments": {"expr": "2 + 2 = 5"}}\n</tool_call>',
        '[TOOL_CALLS]calc{"expr": "2 + 2 = 5"}',
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.calc:0"
        '<|tool_call_argument_begin|>{"expr": "2 + 2 = 5"}<|tool_call_end|>',
    ],
)
def test_tool_call_arguments_are_never_read_as_claims(call):
    """Verification reads a step up to a tool call's opener, and nothing after it: the
    arguments' `2 + 2 = 5` is the tool's business, not a claim of the model's."""
    r = machine()
    (check,) = only(add_step(r, 10, "3 + 4 = 7, so I call the tool. " + call)[0], Check)
    assert check.text == "3 + 4 = 7, so I call the tool. "
    (later,) = only(add_step(r, 200, '"more": "9 * 9 = 80"}')[0], Check)  # inside the call
    assert later.text == "" and r.calls_begun()
    assert all("2 + 2" not in a for a in later.accepted)


def test_under_a_grammar_an_early_exit_hands_the_answer_over():
    """Structured output: the exit closes the thinking (ForceAnswer at the exit's position)
    and the grammar writes the answer; the probed value is not written in, and the job's stop
    reason is still the early exit."""
    r = early(probe_agree=2, answer_by_grammar=True)
    (p1,) = only(add_step(r, 10, "3 + 4 = 7")[0], Probe)
    (p2,) = only(add_step(r, 19, "7 * 2 = 14")[0], Probe)
    assert r.on_probe(p1.key, "14", 0.5, 3) == []
    acts = r.on_probe(p2.key, "14", 0.6, 3)
    assert not only(acts, ExitWith) and only(acts, ForceAnswer) == [ForceAnswer(p2.position)]
    assert r.phase == "answer" and not r.finished and r.stop_reason == "early_exit"
    assert r.on_finish("stop", None, 1.0)[-1] == Finish("early_exit")
