"""The sequence-level changes both engines make through one piece of code: the step-boundary
feed, tokens put in by the caller, a failed sequence, params changed mid-run, an answer
appended at the end, generate's loop (pure logic: a bare StepEngine over real Sequences)."""

from __future__ import annotations

import pytest

from pipeline.engine.base import StepEngine
from pipeline.engine.outputs import Request
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence, SequenceStatus
from pipeline.engine.tokenizer import StepBoundaryDetector
from pipeline.errors import InvalidRequestError, UnknownRequestError

# token 0 "a", 1 "\n", 2 "b\n\nc", 3 "."
TEXTS = ["a", "\n", "b\n\nc", "."]


def seq(prompt=(0, 0)) -> Sequence:
    return Sequence("r", list(prompt), SamplingParams(temperature=0.7, max_tokens=50), 1, 1)


def test_a_two_token_delimiter_ends_a_step_where_its_second_token_lands() -> None:
    s, det = seq(), StepBoundaryDetector(TEXTS, "\n\n")
    assert not s.feed_step(det, 1, 3)  # one "\n": the tail holds it
    assert s.feed_step(det, 1, 4)  # the second completes "\n\n" at position 4
    assert s.step_ends == [4] and s.step_tail == ""
    assert s.feed_step(det, 2, 5) and s.step_ends == [4, 5]  # inside one token


def test_no_detector_records_no_steps() -> None:
    s = seq()
    assert not s.feed_step(None, 1, 3)
    s.extend([1, 1], None)
    assert s.token_ids == [0, 0, 1, 1] and s.step_ends == []


def test_extend_records_the_step_ends_of_the_tokens_it_puts_in() -> None:
    s = seq()
    s.extend([0, 1, 1, 0, 3], StepBoundaryDetector(TEXTS, "\n\n"))
    assert s.token_ids == [0, 0, 0, 1, 1, 0, 3]
    assert s.step_ends == [5]  # after the token that closed the delimiter


def test_fail_ends_the_sequence_as_an_error() -> None:
    s = seq()
    s.fail()
    assert s.status is SequenceStatus.FINISHED and s.is_finished and s.finish_reason == "error"


class Bare(StepEngine):
    """Just the live sequences: `add` and `finish` as an engine keeps them; a step appends a
    token 5 to every running sequence and ends it after three."""

    def __init__(self) -> None:
        self.tokenizer, self.seqs, self._arrivals, self.finished = None, {}, 0, []
        self.paused: set[str] = set()
        self.steps = 0

    def step(self):
        self.steps += 1
        for rid in [r for r in self.seqs if r not in self.paused]:
            s = self.seqs[rid]
            s.token_ids.append(5)
            if s.num_output_tokens >= 3:
                self.finish(rid, "length")
        return []

    @property
    def has_schedulable(self) -> bool:
        return any(r not in self.paused for r in self.seqs)

    def kv_usage(self) -> tuple[int, int]:
        return 0, 0

    def pause(self, request_id: str) -> None:
        self.paused.add(request_id)

    def resume(self, request_id: str) -> None:
        self.paused.discard(request_id)

    def rollback(self, request_id: str, num_tokens: int, seed: int | None = None) -> None:
        del self.seqs[request_id].token_ids[num_tokens:]

    def append_tokens(self, request_id: str, token_ids: list[int]) -> None:
        self.seqs[request_id].token_ids.extend(token_ids)

    def abort(self, request_id: str) -> None:
        self.seqs.pop(request_id)

    def close(self) -> None:
        self.seqs.clear()

    def add(self, request: Request) -> Sequence:
        self._arrivals += 1
        s = Sequence(request.request_id, request.prompt_token_ids, request.params, 7, 1)
        self.seqs[s.request_id] = s
        return s

    def finish(self, request_id: str, reason: str | None = None) -> Sequence:
        s = self.seqs.pop(request_id)
        s.status, s.finish_reason = SequenceStatus.FINISHED, reason
        self.finished.append(request_id)
        return s


def test_update_params_changes_only_what_it_names() -> None:
    e = Bare()
    s = e.add(Request("r", [0, 1], SamplingParams(temperature=0.7, top_p=0.9, max_tokens=50)))
    e.update_params("r", temperature=0.0, max_tokens=12)
    assert (s.params.temperature, s.params.max_tokens, s.params.top_p) == (0.0, 12, 0.9)
    with pytest.raises(UnknownRequestError):
        e.update_params("nope", temperature=0.0)


def test_finish_with_appends_then_ends() -> None:
    e = Bare()
    s = e.add(Request("r", [0, 1], SamplingParams()))
    out = e.finish_with("r", [3, 3], "early_exit")
    assert out is s and s.token_ids == [0, 1, 3, 3] and s.finish_reason == "early_exit"
    assert e.finished == ["r"] and not e.has_unfinished()


def test_add_prompts_needs_a_tokenizer_for_text() -> None:
    e = Bare()
    seqs = e.add_prompts([[0, 1], [1, 0]], SamplingParams(max_tokens=3))
    assert [s.token_ids for s in seqs] == [[0, 1], [1, 0]] and e.num_unfinished == 2
    with pytest.raises(Exception, match="no tokenizer"):
        e.add_prompts(["text"])


def test_generate_runs_every_prompt_to_its_end_in_order() -> None:
    e = Bare()
    outs = e.generate([[1, 2], [3]], SamplingParams(max_tokens=3))
    assert [o.token_ids for o in outs] == [[5, 5, 5], [5, 5, 5]]
    assert [o.finish_reason for o in outs] == ["length", "length"] and e.steps == 3


def test_generate_refuses_to_spin_on_paused_sequences() -> None:
    class Pausing(Bare):
        def add(self, request: Request) -> Sequence:
            s = super().add(request)
            self.pause(s.request_id)  # held, as a strict-mode step end would hold it
            return s

    with pytest.raises(InvalidRequestError):
        Pausing().generate([[3]])
