"""Glue between one engine sequence and its reasoning state machine.

After every engine step the driver reports the sequence's new steps and held finish to the
Reasoner and applies what it asks of the engine (rollback, resume, finish). What it asks of the
outside world — checks to send, notes to stream — goes back to the caller, who owns the
verifier and the event stream.
"""

from __future__ import annotations

from pipeline.decode.reasoning import (
    Action,
    Check,
    Finish,
    Note,
    Reasoner,
    ReasoningConfig,
    Resume,
    Rollback,
)
from pipeline.engine import Engine, SamplingParams
from pipeline.engine.sequence import Sequence

Outward = Check | Note


def reasoning_params(params: SamplingParams, verify: str) -> SamplingParams:
    """`params` set up for a verify mode: held finishes, paused step ends in strict mode, and
    discarded tokens paid from the budget."""
    params.pause_on_finish = verify != "off"
    params.pause_on_step_end = verify == "strict"
    params.charge_rollbacks = True
    return params


class ReasoningDriver:
    def __init__(self, engine: Engine, seq: Sequence, config: ReasoningConfig) -> None:
        self.engine = engine
        self.seq = seq
        self.reasoner = Reasoner(config, seq.seed)

    @property
    def done(self) -> bool:
        return self.seq.is_finished

    def step_text(self, start: int, end: int) -> str:
        return self.engine.tokenizer.decode(self.seq.token_ids[start:end]).strip()

    def advance(self, now_s: float) -> list[Outward]:
        """Report what the last engine step did; returns the checks and notes it produced."""
        seq, r = self.seq, self.reasoner
        if seq.is_finished:
            return []
        actions: list[Action] = []
        while len(r.chain) < seq.num_steps and not r.finished:
            start = r.chain[-1].end if r.chain else seq.num_prompt_tokens
            end = seq.step_ends[len(r.chain)]
            actions += r.on_step(start, end, self.step_text(start, end), now_s)
        if seq.pending_finish is not None and r.held_finish is None and not r.finished:
            start = seq.step_start
            tail = (start, seq.num_tokens, self.step_text(start, seq.num_tokens))
            actions += r.on_finish(seq.pending_finish, tail, now_s)
        if not r.finished and r.verifying:
            actions += r.on_tick(now_s)
        return self._apply(actions)

    def flush(self) -> list[Outward]:
        """After the sequence finished on its own (verify off): its last steps, unchecked."""
        seq, r = self.seq, self.reasoner
        notes: list[Action] = []
        while len(r.chain) < seq.num_steps:
            start = r.chain[-1].end if r.chain else seq.num_prompt_tokens
            end = seq.step_ends[len(r.chain)]
            notes += r.on_unchecked_step(start, end, self.step_text(start, end))
        start = r.chain[-1].end if r.chain else seq.num_prompt_tokens
        if start < seq.num_tokens and (text := self.step_text(start, seq.num_tokens)):
            notes += r.on_unchecked_step(start, seq.num_tokens, text)
        return [n for n in notes if isinstance(n, Note)]

    def verdict(self, key: str, verdict: str, detail: str, now_s: float) -> list[Outward]:
        if self.seq.is_finished:
            return []
        return self._apply(self.reasoner.on_verdict(key, verdict, detail, now_s))

    def _apply(self, actions: list[Action]) -> list[Outward]:
        engine, rid = self.engine, self.seq.request_id
        out: list[Outward] = []
        for a in actions:
            if isinstance(a, Rollback):
                engine.rollback(rid, a.position, seed=a.seed)
            elif isinstance(a, Resume):
                if not self.seq.is_finished:
                    engine.resume(rid)
            elif isinstance(a, Finish):
                if not self.seq.is_finished:
                    engine.finish(rid, a.reason)
            else:
                out.append(a)
        return out
