"""The reasoning driver on the real engine (bundled tiny reasoner): rollbacks, held finishes,
strict pauses, give-ups, with a scripted verifier standing in for the checker process."""

from concurrent.futures import Future

import pytest

from pipeline.config import PipelineConfig
from pipeline.engine import Engine, EngineConfig, SamplingParams
from pipeline.evals.verified import generate_verified
from pipeline.models.resolve import resolve_model
from pipeline.reasoning.driver import closes_in_place
from pipeline.reasoning.types import ReasoningConfig
from pipeline.schema import JobParams

PROMPT = "Q: Compute (7 + 8) * 3 - 5.\n"


class ScriptedVerifier:
    """Contradicts the listed (step index, attempt number) pairs, entails everything else."""

    def __init__(self, reject=lambda step, text, n: False):
        self.reject = reject
        self.calls: list[tuple[int, str]] = []
        self.seen: dict[int, int] = {}

    def submit(self, problem, premises, accepted, step_text):
        index = len(accepted)
        n = self.seen[index] = self.seen.get(index, 0) + 1
        self.calls.append((index, step_text))
        fut: Future = Future()
        bad = self.reject(index, step_text, n)
        fut.set_result(("contradicted", "scripted", ()) if bad else ("entailed", "", ()))
        return fut


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(EngineConfig(model=str(resolve_model("tiny-reasoner")), dtype="float32"))


JOB_FIELDS = ("max_thinking_tokens", "max_steps", "early_exit")  # what a Job carries itself


def run(engine, verify, verifier, seed=3, max_tokens=200, **kw):
    """The prompt as a job of the pipeline (JobParams), through the loop decode runs;
    `kw`: the job's own caps, the pipeline's retries, the reasoning machine's other knobs."""
    own = {k: kw.pop(k) for k in JOB_FIELDS if k in kw}
    kw.setdefault("fast_verdicts", False)  # every verdict the script's
    knobs = {k: kw.pop(k) for k in ("max_retries", "max_backtracks") if k in kw}
    params = [JobParams(temperature=0.7, max_tokens=max_tokens, seed=seed, verify=verify, **own)]
    return generate_verified(engine, [PROMPT], [()], params, verifier,
                             pipeline=PipelineConfig(**knobs), reasoning=kw)[0]  # fmt: skip


@pytest.mark.parametrize("verify", ["async", "strict"])
def test_accepted_steps_change_nothing(engine, verify):
    plain = engine.generate([PROMPT], SamplingParams(temperature=0.7, max_tokens=200, seed=3))[0]
    v = ScriptedVerifier()
    out = run(engine, verify, v)
    assert out.text == plain.text and out.backtracks == 0 and out.wasted_tokens == 0
    assert len(v.calls) == len(out.verdicts) == plain.text.count("\n")
    assert set(out.verdicts) == {"entailed"} and out.finish_reason == "stop"


@pytest.mark.parametrize("verify", ["async", "strict"])
def test_a_contradicted_step_is_resampled_and_its_tokens_are_wasted(engine, verify):
    v = ScriptedVerifier(reject=lambda step, text, n: step == 1 and n == 1)
    out = run(engine, verify, v)
    first_try = [t for i, t in v.calls if i == 1][0]
    assert out.backtracks == 1 and out.wasted_tokens >= len(first_try)
    assert "contradicted" not in out.verdicts and out.finish_reason == "stop"
    # The resampled chain keeps step 0 as it was.
    assert out.text.split("\n")[0] == v.calls[0][1]


def test_a_step_that_always_fails_gives_up_and_answers_from_the_chain_before_it(engine):
    v = ScriptedVerifier(reject=lambda step, text, n: step == 1)
    # Room for every retry: running out of max_tokens would force an answer anyway.
    out = run(engine, "async", v, max_retries=2, max_tokens=1000)
    assert out.gave_up and out.finish_reason == "unverified"
    assert "contradicted" not in out.verdicts
    # step 1 failed up to 3 times (fewer when a resample wrote a refuted text again), then
    # step 0 was dropped once and step 1 failed up to 3 more times.
    assert 3 <= out.backtracks <= 6
    # Then the answer was forced after the one step that held (no step 1 left in the text):
    # the job still answers, and the answer line is the only step after step 0.
    lines = out.text.strip().split("\n")
    assert len(lines) == 2 and lines[1].startswith("Answer:")
    assert out.verdicts[0] != "contradicted" and len(out.verdicts) == 2


def test_the_last_step_is_checked_before_the_finish(engine):
    # Reject the answer line once: the held finish is rolled back and the answer resampled.
    v = ScriptedVerifier(reject=lambda step, text, n: text.startswith("Answer") and n == 1)
    out = run(engine, "async", v)
    answers = [t for _, t in v.calls if t.startswith("Answer")]
    assert len(answers) == 2 and out.backtracks == 1 and out.finish_reason == "stop"
    assert out.text.rstrip("\n").endswith(answers[-1])


@pytest.mark.parametrize("verify", ["off", "async"])
def test_a_spent_budget_forces_an_answer_instead_of_truncating(engine, verify):
    plain = engine.generate([PROMPT], SamplingParams(temperature=0.7, max_tokens=200, seed=3))[0]
    first_step = plain.text.split("\n")[0]
    budget = len(first_step) + 3  # tokens: characters (the tiny reasoner's vocabulary)
    out = run(engine, verify, ScriptedVerifier(), max_thinking_tokens=budget)
    assert out.stop_reason == "budget" and out.finish_reason in ("budget", "stop", "length")
    lines = out.text.strip().split("\n")
    assert lines[0] == first_step and lines[-1].startswith("Answer:")
    if verify == "off":
        # Nothing checked, nothing cut: the unfinished second step stays as it was written
        # (vLLM's thinking_token_budget), and the answer follows it.
        assert len(lines) == 3 and lines[1] and plain.text.split("\n")[1].startswith(lines[1])
    else:  # the answer follows the checked chain: the unfinished step, never checked, is cut
        assert len(lines) == 2
    assert out.num_tokens <= budget + 24 + 2  # the forced answer stays within answer_tokens


def test_probes_end_the_job_early_and_are_paid_for(engine):
    out = run(engine, "off", None, early_exit=True, probe_confidence=0.0)
    lines = out.text.strip().split("\n")
    assert out.stop_reason == "early_exit" and out.probe_tokens > 0
    assert len(lines) == 2 and lines[1].startswith("Answer:")
    # The probe's answer is the job's answer (it was once dropped, leaving a bare cue).
    assert lines[1].removeprefix("Answer:").strip()
    plain = engine.generate([PROMPT], SamplingParams(temperature=0.7, max_tokens=200, seed=3))[0]
    assert lines[0] == plain.text.split("\n")[0]
    assert not engine.has_unfinished()  # the probe's side sequence is gone too


def test_every_probe_token_is_paid_for_even_when_the_job_ends_first(engine, monkeypatch):
    from pipeline.reasoning.driver import ReasoningDriver

    started = []
    start_probe = ReasoningDriver._start_probe

    def recording(self, key, position):
        start_probe(self, key, position)
        started.append(self.probes[key])

    monkeypatch.setattr(ReasoningDriver, "_start_probe", recording)
    # Probes that never agree: the job ends on its own, some probes still running then.
    out = run(engine, "off", None, early_exit=True, probe_agree=99)
    assert out.stop_reason != "early_exit" and len(started) >= 2
    assert out.probe_tokens == sum(p.num_output_tokens for p in started) > 0


# -- verdicts that arrive late: the driver's own loop, as the decode worker runs it --------------


def drive(engine, verify, delay=0, reject=lambda i, text, n: False, max_tokens=200, prompt=PROMPT,
          notes=None, **kw):  # fmt: skip
    """Decode one sequence; each verdict arrives `delay(step, text, n)` engine steps after its
    check (a number: the same delay for all). Returns the driver when the sequence is done;
    the notes it gave out are appended to `notes`."""
    from pipeline.engine import Request
    from pipeline.reasoning.driver import ReasoningDriver
    from pipeline.reasoning.machine import Check
    from pipeline.reasoning.sampling import reasoning_params

    sampling = SamplingParams(temperature=0.7, max_tokens=max_tokens, seed=3)
    params = reasoning_params(sampling, verify)
    kw.setdefault("fast_verdicts", False)  # every verdict the script's
    seq = engine.add(Request(f"late-{id(params)}", engine.encode_prompt(prompt), params))
    d = ReasoningDriver(engine, seq, ReasoningConfig(verify=verify, **kw))
    pending, seen, t = [], {}, 0

    def take(outs):
        for o in outs:
            if notes is not None and not isinstance(o, Check):
                notes.append(o)
            if isinstance(o, Check):
                n = seen[o.step] = seen.get(o.step, 0) + 1
                v = "contradicted" if reject(o.step, o.text, n) else "entailed"
                late = delay(o.step, o.text, n) if callable(delay) else delay
                pending.append((t + late, o.key, v))

    while not d.done and t < 3000:
        if engine.has_schedulable:
            engine.step()
        t += 1
        take(d.advance(float(t)))
        for item in [p for p in pending if p[0] <= t]:
            pending.remove(item)
            take(d.verdict(item[1], item[2], "scripted", float(t)))
    assert d.done, "the sequence stalled"
    return d


def answer_lines(engine, d):
    text = engine.tokenizer.decode(d.seq.output_token_ids)
    return text, [line for line in text.split("\n") if line.startswith("Answer:")]


@pytest.mark.parametrize("verify,delay", [("off", 0), ("async", 0), ("async", 3)])
def test_a_spent_budget_never_adds_a_second_or_empty_answer(engine, verify, delay):
    # Every budget from the middle of the chain to past its end: among them, budgets that run
    # out on the model's own answer line, on its newline and on the end of sequence (each once
    # added a second, greedy answer, or a bare cue, or sampled past the end).
    for budget in range(60, 100, 3):
        d = drive(engine, verify, delay=delay, max_thinking_tokens=budget)
        text, answers = answer_lines(engine, d)
        assert len(answers) == 1 and answers[0].removeprefix("Answer:").strip(), (budget, text)
        assert text.endswith("\n") and text.count("\n") == len(d.reasoner.chain), (budget, text)
        # (a step is read stripped: an unfinished step kept unverified may end in a space)
        assert [s.text for s in d.reasoner.chain] == [x.strip() for x in text.strip().split("\n")]


def test_a_forced_answer_that_cuts_streamed_text_says_so(engine):
    # Verifying, a budget spent inside step 1 cuts it (never checked) before the answer; the
    # stream already had its text, so a backtrack note says what went. Unverified: nothing cut.
    plain = engine.generate([PROMPT], SamplingParams(temperature=0.7, max_tokens=200, seed=3))[0]
    budget = len(plain.text.split("\n")[0]) + 3  # 2 characters into step 1
    for verify in ("async", "off"):
        notes = []
        d = drive(engine, verify, notes=notes, max_thinking_tokens=budget)
        cuts = [n for n in notes if n.kind == "backtrack"]
        text = engine.tokenizer.decode(d.seq.output_token_ids)
        if verify == "off":
            assert not cuts and text.split("\n")[1] == plain.text.split("\n")[1][:2]
            continue
        assert len(cuts) == 1 and cuts[0].step == 1 and cuts[0].verdict is None
        assert cuts[0].text == plain.text.split("\n")[1][:2].strip()
        assert cuts[0].detail.startswith("budget spent") and "follows step 0" in cuts[0].detail
        assert text.split("\n")[1].startswith("Answer:")


@pytest.mark.parametrize(
    ("unfinished", "in_place"),
    [
        ("We add 3 and", True),
        ("</think>\n\nThe sum", True),  # the answer prefix follows the answer so far
        ("<|channel|>final<|message|>The sum", True),
        ('Add.\n<tool_call>\n{"name": "add", "arguments": {"a"', False),
        ("<|channel|>commentary to=functions.add <|constrain|>json", False),
        ("Add.<|tool_calls_section_begin|><|tool_call_begin|>add", False),
        ('[TOOL_CALLS]add{"a": 3', False),
    ],
)
def test_an_unverified_forced_answer_cuts_only_a_tool_call_being_written(unfinished, in_place):
    # The forcing text must not land inside a call's arguments: there the step is cut.
    assert closes_in_place(unfinished) is in_place


def test_a_contradiction_after_the_budget_is_spent_is_cut_out(engine):
    # Step 2 is contradicted while step 1's verdict is still pending and the budget is spent.
    def delay(i, text, n):
        return {1: 20}.get(i, 4)

    d = drive(engine, "async", delay=delay, reject=lambda i, t, n: i == 2, max_thinking_tokens=64)
    text, answers = answer_lines(engine, d)
    assert d.reasoner.stop_reason == "budget" and len(answers) == 1
    assert "45 - 5 = 40" not in text  # the contradicted step (it was read back in as new)
    assert "contradicted" not in [s.verdict for s in d.reasoner.chain]


def test_agreeing_probes_exit_when_the_verdicts_come_after_them(engine):
    d = drive(engine, "async", delay=8, early_exit=True)
    text, answers = answer_lines(engine, d)
    assert d.reasoner.stop_reason == "early_exit" and len(answers) == 1
    assert answers[0].removeprefix("Answer:").strip()


def test_an_early_exit_that_cuts_streamed_text_says_so(engine):
    # The probe answers while decode goes on: the step begun meanwhile is cut for the exit's
    # answer, verifying or not, and the stream (which had it) gets a cut: no verdict.
    for verify, delay in (("off", 0), ("async", 8)):
        notes = []
        d = drive(engine, verify, delay=delay, notes=notes, early_exit=True)
        assert d.reasoner.stop_reason == "early_exit" and d.seq.num_discarded_tokens > 0
        cuts = [n for n in notes if n.kind == "backtrack"]
        assert len(cuts) == 1 and cuts[0].verdict is None and cuts[0].text, cuts
        assert cuts[0].detail.startswith("early exit: the unfinished step is cut")


def test_a_prompt_near_the_context_end_gets_a_forced_answer_not_a_crash(engine):
    prompt = "Q: Compute " + "7 + 8 * " * 58 + "1.\n"  # leaves ~40 tokens of context
    assert engine.max_model_len - len(engine.encode_prompt(prompt)) < 60
    d = drive(engine, "async", prompt=prompt, max_tokens=500)
    text, answers = answer_lines(engine, d)
    assert d.seq.num_tokens <= engine.max_model_len
    assert len(answers) == 1 and d.reasoner.stop_reason == "budget", text
