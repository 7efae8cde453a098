"""The vLLM backend's bookkeeping, with a scripted stand-in for the server (no vLLM here).

Step splitting (one submission per step, resubmitted with the whole prefix), pause, rollback
with a new seed, held finishes, budgets charged for discarded tokens, appended tokens, and
deltas of abandoned submissions ignored.
"""

from __future__ import annotations

import pytest

from pipeline.config import EngineConfig
from pipeline.engine import Request, SamplingParams
from pipeline.engine.grammar import GuidedDecoding, compile_grammar
from pipeline.engine.sequence import SequenceStatus
from pipeline.models.resolve import resolve_model
from pipeline.vllm.engine import VLLMEngine, submission_seed
from pipeline.vllm.server import Delta
from pipeline.vllm.structured import structured_outputs_field


class FakeStreams:
    """Records submissions and cancellations; the test decides what comes back."""

    def __init__(self) -> None:
        self.bodies: dict[str, dict] = {}
        self.cancelled: list[str] = []
        self.pending: list[Delta] = []

    def submit(self, sub_id: str, body: dict) -> None:
        self.bodies[sub_id] = body

    def cancel(self, sub_id: str) -> None:
        self.cancelled.append(sub_id)

    def poll(self, timeout: float) -> list[Delta]:
        out, self.pending = self.pending, []
        return out

    def close(self) -> None:
        pass

    @property
    def last(self) -> tuple[str, dict]:
        return list(self.bodies.items())[-1]

    def send(self, text_ids: list[int], done: bool = False, finish: str | None = None) -> None:
        sub, _ = self.last
        self.pending.append(Delta(sub, text_ids, [-0.5] * len(text_ids), finish, done))


@pytest.fixture(scope="module")
def model_path() -> str:
    return str(resolve_model("tiny-reasoner"))


@pytest.fixture
def engine(model_path):
    return VLLMEngine(EngineConfig(model=model_path, dtype="float32"), streams=FakeStreams())


def ids(engine: VLLMEngine, text: str) -> list[int]:
    return engine.tokenizer.encode(text, add_special_tokens=False)


def drain(engine: VLLMEngine) -> list:
    """Step until every token that arrived is handed out (one per sequence per step)."""
    outs = engine.step()
    while engine.buffered:
        outs += engine.step()
    return outs


def start(engine: VLLMEngine, **params) -> tuple[str, list[int]]:
    prompt = ids(engine, "Q: What is 2 + 3?\n")
    engine.add(Request("r", prompt, SamplingParams(seed=7, **params)))
    engine.step()
    return "r", prompt


def test_a_step_is_one_submission_and_the_next_resubmits_the_whole_prefix(engine):
    rid, prompt = start(engine, max_tokens=50)
    sub, body = engine.streams.last
    assert body["prompt"] == prompt and body["stream"] and body["max_tokens"] == 50
    assert set(engine.step_detector.delimiter_tokens) <= set(body["stop_token_ids"])
    assert body["seed"] == submission_seed(7, len(prompt))
    step = ids(engine, "2 + 3 = 5\n")
    engine.streams.send(step[:3])
    engine.streams.send(step[3:], done=True, finish="stop")
    first = engine.step()
    assert [o.token_id for o in first] == step[:1]  # one token a step, as the native engine
    outs = first + drain(engine)
    seq = engine.seqs[rid]
    assert [o.token_id for o in outs] == step and outs[-1].ends_step
    assert seq.step_ends == [len(prompt) + len(step)] and seq.cumulative_logprob < 0
    engine.step()  # the finished step's sequence is submitted again, prefix and all
    sub2, body2 = engine.streams.last
    assert sub2 != sub and body2["prompt"] == prompt + step
    assert body2["max_tokens"] == 50 - len(step)
    assert body2["seed"] == submission_seed(7, len(prompt) + len(step))


def test_pause_at_step_end_drops_the_tokens_after_it_and_resume_resubmits(engine):
    rid, prompt = start(engine, max_tokens=50, pause_on_step_end=True)
    sub, _ = engine.streams.last
    step = ids(engine, "2 + 3 = 5\n")
    engine.streams.send([*step, *ids(engine, "Ans")])  # vLLM ran past the stop (it won't, but)
    outs = drain(engine)
    seq = engine.seqs[rid]
    assert outs[-1].paused and seq.status is SequenceStatus.PAUSED
    assert seq.output_token_ids == step and sub in engine.streams.cancelled
    assert not engine.has_schedulable
    n = len(engine.streams.bodies)
    engine.step()
    assert len(engine.streams.bodies) == n  # paused: nothing resubmitted
    engine.resume(rid)
    engine.step()
    assert engine.streams.last[1]["prompt"] == prompt + step


def test_rollback_discards_resubmits_with_the_new_seed_and_ignores_stale_tokens(engine):
    rid, prompt = start(engine, max_tokens=40, charge_rollbacks=True)
    first = ids(engine, "2 + 3 = 6\n")
    engine.streams.send(first, done=True, finish="stop")
    drain(engine)
    engine.step()  # the next step is in flight
    stale, _ = engine.streams.last
    engine.rollback(rid, len(prompt), seed=99)
    seq = engine.seqs[rid]
    assert seq.num_tokens == len(prompt) and seq.num_discarded_tokens == len(first)
    assert seq.step_ends == [] and stale in engine.streams.cancelled
    engine.streams.pending.append(Delta(stale, ids(engine, "9"), [0.0]))  # arrives late
    engine.step()
    assert seq.num_tokens == len(prompt)  # the late token of the abandoned step is ignored
    body = engine.streams.last[1]
    assert body["prompt"] == prompt and body["seed"] == submission_seed(99, len(prompt))
    assert body["max_tokens"] == 40 - len(first)  # discarded tokens were paid for


def test_a_held_finish_pauses_until_finish_is_called(engine):
    rid, prompt = start(engine, max_tokens=50, pause_on_finish=True)
    eos = min(engine.eos_token_ids)
    engine.streams.send([*ids(engine, "Answer: 5"), eos], done=True, finish="stop")
    outs = drain(engine)
    seq = engine.seqs[rid]
    assert outs[-1].finish_reason == "stop" and not outs[-1].finished and outs[-1].paused
    assert seq.pending_finish == "stop" and not seq.is_finished
    engine.finish(rid)
    assert seq.is_finished and seq.finish_reason == "stop" and rid not in engine.seqs


def test_the_budget_ends_a_sequence_at_length(engine):
    rid, _ = start(engine, max_tokens=4)
    engine.streams.send(ids(engine, "2 + 3"), done=True, finish="length")
    outs = drain(engine)
    assert outs[-1].finished and outs[-1].finish_reason == "length"
    assert len(outs) == 4 and rid not in engine.seqs  # tokens past the budget are not kept


def test_appended_tokens_cancel_the_step_in_flight_and_lead_the_next_one(engine):
    rid, prompt = start(engine, max_tokens=50)
    sub, _ = engine.streams.last
    cue = ids(engine, "Answer:")
    engine.append_tokens(rid, cue)
    assert sub in engine.streams.cancelled
    engine.step()
    assert engine.streams.last[1]["prompt"] == prompt + cue


def test_a_server_error_ends_the_sequence_and_abort_cancels(engine):
    rid, _ = start(engine, max_tokens=50)
    sub, _ = engine.streams.last
    engine.streams.pending.append(Delta(sub, [], [], done=True, error="connection refused"))
    engine.step()
    assert rid not in engine.seqs
    engine.add(Request("b", ids(engine, "Q: 1 + 1?\n"), SamplingParams()))
    engine.step()
    sub_b, _ = engine.streams.last
    engine.abort("b")
    assert sub_b in engine.streams.cancelled and not engine.has_unfinished()


def test_tokens_that_arrive_together_are_handed_out_one_a_step(engine):
    """Prefill pauses each sequence after its first token: it must be able to, even when vLLM
    sent the second token in the same chunk."""
    rid, _ = start(engine, max_tokens=2, ignore_eos=True)
    engine.streams.send(ids(engine, "12"), done=True, finish="length")
    (out,) = engine.step()
    engine.pause(out.request_id)
    seq = engine.seqs[rid]
    assert seq.num_output_tokens == 1 and not engine.buffered and rid not in engine.live


# -- structured output passed through (vllm/structured.py) ------------------------------------

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def guided_start(engine: VLLMEngine, after: tuple[str, ...] = ("Answer:",), **params):
    spec = GuidedDecoding(compile_grammar("json", SCHEMA), after)
    return start(engine, max_tokens=80, guided=spec, pause_on_finish=True, **params)


def test_the_thinking_runs_free_and_the_answer_is_submitted_with_the_grammar(engine):
    rid, prompt = guided_start(engine)
    sub, body = engine.streams.last
    assert "structured_outputs" not in body  # the thinking: no grammar
    thinking = ids(engine, "2 + 3 = 5\n")
    engine.streams.send(thinking, done=True, finish="stop")
    drain(engine)
    engine.step()
    sub, body = engine.streams.last
    assert "structured_outputs" not in body
    closing = ids(engine, "Answer:")
    engine.streams.send([*closing, *ids(engine, " five")])  # vLLM ran on past the marker
    outs = drain(engine)
    seq = engine.seqs[rid]
    assert seq.output_token_ids == thinking + closing  # nothing after the marker handed out
    assert [o.token_id for o in outs] == closing and sub in engine.streams.cancelled
    engine.step()
    sub2, body2 = engine.streams.last
    assert sub2 != sub and body2["prompt"] == prompt + thinking + closing
    assert body2["structured_outputs"]["json"]["properties"] == SCHEMA["properties"]
    assert not set(engine.step_detector.delimiter_tokens) & set(body2["stop_token_ids"])
    answer = ids(engine, ' {"a": 5}\n')  # a step delimiter inside: the answer goes on
    engine.streams.send(answer, done=True, finish="stop")
    outs = drain(engine)
    assert seq.output_token_ids == thinking + closing + answer
    assert not any(o.paused for o in outs)


def test_a_grammar_without_a_marker_holds_from_the_first_token(engine):
    guided_start(engine, after=())
    assert "json" in engine.streams.last[1]["structured_outputs"]


def test_forced_text_that_closes_the_thinking_hands_over_to_the_grammar(engine):
    rid, prompt = guided_start(engine)
    engine.streams.send(ids(engine, "2 + 3"))
    drain(engine)
    engine.append_tokens(rid, ids(engine, "\nAnswer:"))  # budget forcing's handover
    engine.step()
    body = engine.streams.last[1]
    assert body["prompt"] == prompt + ids(engine, "2 + 3\nAnswer:")
    assert "structured_outputs" in body


def test_rollback_before_the_marker_frees_the_thinking_and_into_the_answer_is_an_error(engine):
    rid, prompt = guided_start(engine)
    thinking, closing = ids(engine, "2 + 3 = 5\n"), ids(engine, "Answer:")
    engine.streams.send([*thinking, *closing])
    drain(engine)
    engine.rollback(rid, len(prompt) + len(thinking))  # back into the thinking
    engine.step()
    assert "structured_outputs" not in engine.streams.last[1]
    engine.streams.send(closing)
    drain(engine)
    engine.step()
    engine.streams.send(ids(engine, ' {"a"'))
    drain(engine)
    engine.rollback(rid, engine.seqs[rid].num_tokens - 2)  # part-way into the answer
    engine.step()
    assert rid not in engine.seqs  # ended (finish reason "error"): never an unchecked answer


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        ("json", SCHEMA, "json"),
        ("json_object", None, "json"),
        ("regex", "[0-9]+", "grammar"),
        ("choice", ["yes", "no"], "grammar"),
        ("grammar", 'start: "a" | "b"', "grammar"),
    ],
)
def test_every_grammar_kind_maps_to_a_structured_outputs_field(kind, spec, field):
    got = structured_outputs_field(compile_grammar(kind, spec))
    assert list(got) == [field]
    if kind == "json":  # the native engine's options travel with the schema
        assert got["json"]["x-guidance"] == {"whitespace_flexible": False}
    if kind == "regex":
        assert "[0-9]+" in got["grammar"]
