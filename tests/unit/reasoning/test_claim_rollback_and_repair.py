"""Claims as the unit of rollback, and verify mode `repair`, on real engines and tokenizers
(the bundled tiny reasoner, R1-style reasoner and SmolLM2): a contradicted claim mid-step rolls
the sequence back to its wrong value (else its start) and no further; a wrong value is replaced
by the right one and the model goes on; a repair that would change any text before the value is
refused."""

from concurrent.futures import Future

import pytest

from pipeline.config import PipelineConfig
from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.evals.verified import generate_verified
from pipeline.models.resolve import resolve_model
from pipeline.reasoning.claim_watch import ClaimWatch, FalseClaim
from pipeline.schema import ClaimInfo, JobParams
from pipeline.verify.repair import problem_values

PROMPT = "Q: Compute (7 + 8) * 3 - 5.\n"
SCRIPTED = {"fast_verdicts": False}  # every verdict is the scripted verifier's


def engine_of(name: str) -> Engine:
    return Engine(EngineConfig(model=str(resolve_model(name)), dtype="float32",
                               kv_cache_memory_gb=0.1))  # fmt: skip


@pytest.fixture(scope="module")
def tiny() -> Engine:
    return engine_of("tiny-reasoner")


class ClaimVerifier:
    """Contradicts the first attempt at step `step`, naming the claim that starts at `text`'s
    first occurrence in it; entails everything else."""

    def __init__(self, step: int, text: str, kind: str = "arithmetic") -> None:
        self.step, self.text, self.kind = step, text, kind
        self.calls: list[tuple[int, str]] = []

    def submit(self, problem, premises, accepted, step_text):
        index = len(accepted)
        first = not any(i == index for i, _ in self.calls)
        self.calls.append((index, step_text))
        fut: Future = Future()
        if index == self.step and first and self.text in step_text:
            at = step_text.index(self.text)
            claim = ClaimInfo(text=self.text, span=(at, len(step_text)), verdict="contradicted",
                              kind=self.kind)  # fmt: skip
            fut.set_result(("contradicted", "scripted", (claim,)))
        else:
            fut.set_result(("entailed", "", ()))
        return fut


def test_a_contradicted_claim_rolls_back_to_its_start_and_no_further(tiny):
    plain = tiny.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=200))[0]
    steps = plain.text.split("\n")
    claim = "30 + 18"  # mid-step: `16 * 3 = 10 * 3 + 6 * 3 = 30 + 18 = 48`
    assert claim in steps[1] and not steps[1].startswith(claim)
    v = ClaimVerifier(1, claim)
    params = [JobParams(temperature=0.0, max_tokens=200, seed=3, verify="async")]
    out = generate_verified(tiny, [PROMPT], [()], params, v, reasoning=SCRIPTED)[0]
    assert out.backtracks == 1
    # Greedy from the kept prefix (its KV kept, not recomputed) gives the fresh decode's text:
    # a stale or shifted KV would change the continuation.
    assert out.text == plain.text
    # Discarded: the claim on to the step's end (the verdict came at once), not the step.
    tail = steps[1][steps[1].index(claim) :] + "\n"
    assert out.wasted_tokens == len(tiny.tokenizer.encode(tail, add_special_tokens=False))
    assert out.wasted_tokens < len(tiny.tokenizer.encode(steps[1] + "\n", add_special_tokens=False))
    # The step was checked again whole, its text before the claim as first written.
    again = [t for i, t in v.calls if i == 1]
    assert len(again) == 2 and again[1] == again[0] == steps[1]


@pytest.mark.parametrize("kind", ["solution", "binding", "equation"])
def test_a_claim_wrong_by_what_came_before_rolls_back_the_whole_step(tiny, kind):
    """A wrong answer or a value an earlier step fixed: resampling the claim alone would only
    guess another value, so the step goes whole."""
    plain = tiny.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=200))[0]
    step = plain.text.split("\n")[1]
    params = [JobParams(temperature=0.0, max_tokens=200, seed=3, verify="async")]
    v = ClaimVerifier(1, "30 + 18", kind)
    out = generate_verified(tiny, [PROMPT], [()], params, v, reasoning=SCRIPTED)[0]
    assert out.backtracks == 1 and out.text == plain.text
    assert out.wasted_tokens == len(tiny.tokenizer.encode(step + "\n", add_special_tokens=False))


def test_a_verdict_without_claims_rolls_back_the_whole_step(tiny):
    class StepVerifier(ClaimVerifier):
        def submit(self, problem, premises, accepted, step_text):
            fut = super().submit(problem, premises, accepted, step_text)
            verdict, detail, _ = fut.result()
            done: Future = Future()
            done.set_result((verdict, detail, ()))
            return done

    plain = tiny.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=200))[0]
    step = plain.text.split("\n")[1]
    params = [JobParams(temperature=0.0, max_tokens=200, seed=3, verify="async")]
    v = StepVerifier(1, "30 + 18")
    out = generate_verified(tiny, [PROMPT], [()], params, v, reasoning=SCRIPTED)[0]
    assert out.backtracks == 1 and out.text == plain.text
    assert out.wasted_tokens == len(tiny.tokenizer.encode(step + "\n", add_special_tokens=False))


# -- repair ----------------------------------------------------------------------------------

# (model, text the "model" wrote, the value written, the right one): prose, LaTeX, GSM8K
# annotations, a markdown list; each model's own tokenizer.
CASES = [
    ("tiny-reasoner", "\n8 * 4 = 30\n", "30", "32"),
    ("r1-reasoner", "\n\nNow 88 * 40 = 3120. After that", "3120", "3520"),
    ("r1-reasoner", "\n\nWhich means $36 \\times 4 = 132$.", "132", "144"),
    ("r1-reasoner", "\n\nThen \\(88 \\times 40 = 3640\\).", "3640", "3520"),
    ("smollm2", " She makes <<48/2=25>>25 clips.", "25", "24"),
    ("smollm2", "\n- 64 * 4 = 248\n- next", "248", "256"),
]


@pytest.fixture(scope="module")
def engines():
    made: dict[str, Engine] = {}

    def get(name: str) -> Engine:
        if name not in made:
            made[name] = engine_of(name)
        return made[name]

    return get


def written(engine: Engine, text: str, rid: str):
    """A sequence that has taken one engine step and then 'wrote' `text`."""
    prompt = engine.encode_prompt("Compute the products.")
    seq = engine.add(Request(rid, prompt, SamplingParams(temperature=0.7, seed=5, max_tokens=80)))
    engine.step()
    engine.append_tokens(rid, engine.tokenizer.encode(text, add_special_tokens=False))
    return seq


@pytest.mark.parametrize(("model", "text", "old", "new"), CASES)
def test_a_wrong_value_is_replaced_and_the_model_goes_on(engines, model, text, old, new):
    engine = engines(model)
    seq = written(engine, text, f"r-{model}-{old}")
    before = engine.tokenizer.decode(seq.output_token_ids)
    made = ClaimWatch(engine, seq, 8).scan(seq.num_prompt_tokens, 0)
    assert made is not None
    mark, appended = made
    assert (mark.old, mark.new) == (old, new)
    after = engine.tokenizer.decode(seq.output_token_ids)
    cut = before.index(old, before.rindex("="))
    # Everything before the value as written, then the right value, nothing after it yet.
    assert after == before[:cut] + new
    assert seq.num_discarded_tokens > 0 and appended > 0
    n = seq.num_tokens
    for _ in range(3):
        engine.step()
    assert seq.num_tokens > n  # sampling goes on after the repaired value
    assert engine.tokenizer.decode(seq.output_token_ids).startswith(before[:cut] + new)
    engine.abort(seq.request_id)


@pytest.mark.parametrize(
    ("model", "text", "old", "new"),
    [
        ("r1-reasoner", "\n\nSo x = 7. Then", "7", "4"),
        ("r1-reasoner", "\n\nWhich means $2x = 10$.", "10", "8"),
        ("smollm2", "\nSo 2x = 10, and", "10", "8"),
    ],
)
def test_a_wrong_value_of_an_unknown_the_problem_fixes_is_replaced(engines, model, text, old, new):
    """`Solve 2x + 3 = 11.`: the problem fixes x = 4, so `x = 7` has a value to put in."""
    engine = engines(model)
    seq = written(engine, text, f"r-{model}-x-{old}")
    before = engine.tokenizer.decode(seq.output_token_ids)
    assert ClaimWatch(engine, seq, 8).scan(seq.num_prompt_tokens, 0) is None  # nothing fixed
    watch = ClaimWatch(engine, seq, 8, values=problem_values("Solve 2x + 3 = 11."))
    mark, _ = watch.scan(seq.num_prompt_tokens, 0)
    assert (mark.old, mark.new) == (old, new)
    cut = before.index(old, before.rindex("="))
    assert engine.tokenizer.decode(seq.output_token_ids) == before[:cut] + new
    engine.abort(seq.request_id)


@pytest.mark.parametrize(
    ("model", "text", "old", "new"),
    [
        ("r1-reasoner", "\n\nLet me start: 9x = 22 + 3 = 25. So", "9x", "5x"),
        ("r1-reasoner", "\n\nTo begin, $x = 29 - 19 =", "x", "2x"),
        ("smollm2", "\n- 3x = 22 + 3 = 25\n- x", "3x", "5x"),
    ],
)
def test_a_slipped_coefficient_is_replaced_and_the_claim_kept(engines, model, text, old, new):
    """The problem's system fixes x: the left side's coefficient is put right and the text the
    model wrote after it is put back as written; sampling goes on after it."""
    engine = engines(model)
    seq = written(engine, text, f"r-{model}-coef-{old}")
    before = engine.tokenizer.decode(seq.output_token_ids)
    first = "Solve the system: 3x + y = 22, 2x - y = 3."
    problem = first if "22" in text else "Solve the system: 3x + y = 29, x + y = 19."
    watch = ClaimWatch(engine, seq, 8, values=problem_values(problem))
    mark, appended = watch.scan(seq.num_prompt_tokens, 0)
    assert (mark.old, mark.new) == (old, new)
    at = before.rindex(old, 0, before.index("="))
    # One change: the coefficient; everything before and after it as the model wrote it.
    after = engine.tokenizer.decode(seq.output_token_ids)
    assert after == before[:at] + new + before[at + len(old) :]
    assert seq.num_discarded_tokens > 0 and appended > 0
    n = seq.num_tokens
    engine.step()
    assert seq.num_tokens > n
    engine.abort(seq.request_id)


def test_a_coefficient_is_not_repaired_in_a_completed_step(engines):
    """Its text kept would hold the step's end: the step's verdict decides (a rollback)."""
    engine = engines("tiny-reasoner")
    seq = written(engine, "\n9x = 22 + 3 = 25\n", "r-coef-final")
    ids = list(seq.token_ids)
    watch = ClaimWatch(engine, seq, 8, values=problem_values("Solve: 3x + y = 22, 2x - y = 3."))
    assert watch.scan(seq.num_prompt_tokens, 0) is None
    assert seq.token_ids == ids and seq.num_discarded_tokens == 0
    engine.abort(seq.request_id)


def test_a_repair_that_would_change_text_before_the_value_is_refused(engines, monkeypatch):
    engine = engines("r1-reasoner")
    seq = written(engine, "\n\nNow 88 * 40 = 3120. After that", "r-refused")
    ids = list(seq.token_ids)
    real = engine.tokenizer.encode

    def shifted(text, add_special_tokens=False):  # re-tokenizes the prefix into other text
        return real("X" + text, add_special_tokens=add_special_tokens)

    monkeypatch.setattr(engine.tokenizer, "encode", shifted)
    watch = ClaimWatch(engine, seq, 8)
    found = watch.scan(seq.num_prompt_tokens, 0)
    assert watch.num_refused == 1 and seq.token_ids == ids and seq.num_discarded_tokens == 0
    # Not repaired: handed back as a false claim, for the rollback to its start instead.
    assert isinstance(found, FalseClaim) and found.claim.text == "88 * 40 = 3120"
    assert found.text[found.claim.span[0] :].startswith("88 * 40 = 3120")
    engine.abort(seq.request_id)


def test_repair_mode_end_to_end_keeps_only_right_values(engines):
    """The R1-style reasoner with verify mode repair through the loop decode runs: it makes
    arithmetic slips at T = 0.7; each kept repair's new value is in the final text, and far
    fewer tokens are discarded than async's rollbacks discard on the same seeds."""
    from pipeline.evals import tasks
    from pipeline.evals.runner import prompts_for

    engine = engines("r1-reasoner")
    problems = tasks.load_problems("broad", 12, 1)
    prompts = prompts_for(problems, engine.tokenizer, engine.reasoning_format)
    from pipeline.verify.local import LocalVerifier

    verifier = LocalVerifier(1)
    try:
        runs = {}
        for mode in ("async", "repair"):
            params = [JobParams(temperature=0.7, max_tokens=512, seed=s, verify=mode)
                      for s in range(len(prompts))]  # fmt: skip
            runs[mode] = generate_verified(
                engine, prompts, [p.premises for p in problems], params, verifier,
                questions=[p.question for p in problems], pipeline=PipelineConfig(),
            )  # fmt: skip
    finally:
        verifier.close()
    repaired = [o for o in runs["repair"] if o.repairs]
    assert repaired, "no slip was repaired on 12 problems"
    for o in repaired:
        for _, new in o.repairs:
            assert new in o.text
    wasted = {m: sum(o.wasted_tokens for o in outs) for m, outs in runs.items()}
    assert wasted["repair"] < wasted["async"]


def test_a_repair_at_a_held_finish_lets_the_sequence_sample_again(tiny):
    """The model ends right after a wrong value (the engine holds its finish for the verdicts):
    the repair cuts the finish away with the value, so the sequence must run again (a bench
    once stalled here: paused, with no check in flight)."""
    from pipeline.reasoning.driver import ReasoningDriver
    from pipeline.reasoning.types import ReasoningConfig

    text = "\n8 * 4 = 30"
    n = len(tiny.tokenizer.encode(text, add_special_tokens=False))
    params = SamplingParams(temperature=0.7, seed=5, max_tokens=n + 2, pause_on_finish=True)
    seq = tiny.add(Request("held", tiny.encode_prompt(PROMPT), params))
    tiny.step()
    tiny.append_tokens("held", tiny.tokenizer.encode(text, add_special_tokens=False))
    tiny.step()  # the last token allowed: the finish is held
    assert seq.pending_finish == "length"
    driver = ReasoningDriver(
        tiny, seq, ReasoningConfig(verify="repair", format=tiny.reasoning_format)
    )
    driver.advance(0.0)
    assert driver.watch is not None and [(m.old, m.new) for m in driver.watch.marks] == [
        ("30", "32")
    ]
    assert seq.pending_finish is None and tiny.has_schedulable
    tiny.step()
    assert seq.num_tokens > seq.num_prompt_tokens + 1 + n - 1  # it sampled after the value
    tiny.abort("held")


def test_a_false_claim_with_no_unknowns_is_contradicted_in_decode_not_sent(tiny):
    """`8 * 4 = 30` is false whatever the problem says: the step is rolled back at once, with
    no round trip to the checker; a true step still goes to it."""
    from pipeline.reasoning.driver import ReasoningDriver
    from pipeline.reasoning.types import Check, Note, ReasoningConfig

    seq = tiny.add(Request("fast", tiny.encode_prompt(PROMPT), SamplingParams(max_tokens=80)))
    tiny.step()
    tiny.append_tokens("fast", tiny.tokenizer.encode("\n8 * 4 = 30\n", add_special_tokens=False))
    config = ReasoningConfig(verify="async", format=tiny.reasoning_format)
    driver = ReasoningDriver(tiny, seq, config)
    outs = driver.advance(0.0)
    checks = [o for o in outs if isinstance(o, Check)]
    verdicts = [o for o in outs if isinstance(o, Note) and o.kind == "verdict"]
    assert [c.text for c in checks] == [driver.reasoner.chain[0].text]  # the first step only
    assert verdicts[0].verdict == "contradicted" and "decided in decode" in verdicts[0].detail
    assert verdicts[0].claims[0].text == "8 * 4 = 30"
    assert driver.reasoner.num_fast_verdicts == 1 and driver.reasoner.num_backtracks == 1
    assert "8 * 4 = 30" not in tiny.tokenizer.decode(seq.output_token_ids)  # rolled back
    tiny.abort("fast")


# (model, text written so far, the false claim): the step is still being written when its
# claim's value closes; prose, LaTeX, GSM8K annotations, a markdown list.
MID_STEP = [
    ("tiny-reasoner", "\n16 * 3 = 10 * 3 + 6 * 3 = 30 + 18 = 49 so", "30 + 18 = 49", "49"),
    ("r1-reasoner", "\n\nSo the cost is 88 * 40 = 3120 dollars, and", "88 * 40 = 3120", "3120"),
    ("r1-reasoner", "\n\nWhich means $36 \\times 4 = 132$ and", "36 \\times 4 = 132", "132"),
    ("smollm2", " She makes <<48/2=25>>25 clips", "48/2=25", "25"),
    ("smollm2", "\n- Next, 64 * 4 = 248, so", "64 * 4 = 248", "248"),
]


@pytest.mark.parametrize(("model", "text", "claim", "value"), MID_STEP)
def test_a_false_claim_is_rolled_back_mid_step_to_its_value(engines, model, text, claim, value):
    """Async (no repair), fast verdicts on: the moment a false claim's value is closed, the step
    being written is rolled back to the claim's wrong value: no check sent, the text before it
    (the claim's expression too) kept token for token, a backtrack note naming the claim."""
    from pipeline.reasoning.driver import ReasoningDriver
    from pipeline.reasoning.types import Check, Note, ReasoningConfig

    engine = engines(model)
    rid = f"mid-{model}-{claim}"
    seq = written(engine, text, rid)
    output = engine.tokenizer.decode(seq.output_token_ids)
    driver = ReasoningDriver(engine, seq, ReasoningConfig(format=engine.reasoning_format))
    ids = list(seq.token_ids[: seq.num_tokens])
    steps_before = len(driver.reasoner.chain)
    outs = driver.advance(0.0)
    backtracks = [o for o in outs if isinstance(o, Note) and o.kind == "backtrack"]
    assert backtracks, f"no rollback for {claim!r}: {outs}"
    assert claim in backtracks[-1].text and "mid-step" in backtracks[-1].detail
    checks = [o.text for o in outs if isinstance(o, Check)]
    assert not any(claim in c for c in checks)  # decided here, never sent
    kept = engine.tokenizer.decode(seq.token_ids[seq.num_prompt_tokens : seq.num_tokens])
    # Cut at the wrong value's start (a token that spans into it may start a little before
    # it), and no further: what was kept is a token prefix of what was written.
    at = output.index(claim) + claim.rindex(value)
    assert output.startswith(kept) and at - 4 <= len(kept) <= at
    assert seq.token_ids[: seq.num_tokens] == ids[: seq.num_tokens]
    assert driver.reasoner.num_fast_verdicts == 1
    assert len(driver.reasoner.chain) >= steps_before
    engine.abort(rid)


def test_an_open_value_is_not_judged_before_it_is_closed(tiny):
    """`8 * 4 = 3` may still become `8 * 4 = 32`: nothing is rolled back until it closes."""
    from pipeline.reasoning.driver import ReasoningDriver
    from pipeline.reasoning.types import Note, ReasoningConfig

    seq = written(tiny, "\n8 * 4 = 3", "open")
    driver = ReasoningDriver(tiny, seq, ReasoningConfig(format=tiny.reasoning_format))
    n = seq.num_tokens
    outs = driver.advance(0.0)
    assert not [o for o in outs if isinstance(o, Note) and o.kind == "backtrack"]
    assert seq.num_tokens == n and driver.reasoner.num_fast_verdicts == 0
    tiny.abort("open")
