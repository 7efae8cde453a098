"""Turning a decoding sequence into the job's Events and its one Result (plain logic)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline import schema
from pipeline.engine.sequence import Sequence
from pipeline.engine.tokenizer import Tokenizer

_ANSWER = re.compile(r"^\s*answer\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_answer(text: str) -> str | None:
    """The value of the last `Answer: <value>` line, if any."""
    found = _ANSWER.findall(text)
    return found[-1] if found else None


@dataclass(slots=True)
class JobRun:
    """One job being decoded: its handoff, its sequence, and what has been streamed so far."""

    handoff: schema.Handoff
    seq: Sequence
    started_ms: int
    next_event: int = 1  # seq 0 is ingest's "accepted"
    emitted_tokens: int = 0  # output tokens already streamed as token events
    emitted_steps: int = 0  # completed steps already streamed
    token_text: str = ""  # decoded text of the streamed tokens (for token deltas)
    steps: list[str] = field(default_factory=list)

    def event(self, kind: str, ts_ms: int, **kw) -> schema.Event:
        ev = schema.Event(id=self.handoff.id, seq=self.next_event, kind=kind, ts_ms=ts_ms, **kw)
        self.next_event += 1
        return ev


def new_events(run: JobRun, tokenizer: Tokenizer, now_ms: int) -> list[schema.Event]:
    """Events for what the sequence produced since the last call (tokens, completed steps)."""
    seq, h = run.seq, run.handoff
    events: list[schema.Event] = []
    out = seq.output_token_ids
    if h.params.stream == "tokens" and len(out) > run.emitted_tokens:
        text = tokenizer.decode(out)
        if not text.endswith("\ufffd"):  # hold back a partial multi-byte character
            events.append(run.event("token", now_ms, text=text[len(run.token_text) :]))
            run.token_text = text
            run.emitted_tokens = len(out)
    while run.emitted_steps < seq.num_steps:
        start = seq.step_ends[run.emitted_steps - 1] if run.emitted_steps else seq.num_prompt_tokens
        end = seq.step_ends[run.emitted_steps]
        text = tokenizer.decode(seq.token_ids[start:end]).strip()
        run.steps.append(text)
        if h.params.stream != "none":
            events.append(run.event("step", now_ms, step=run.emitted_steps, text=text))
        run.emitted_steps += 1
    return events


def finish(
    run: JobRun, tokenizer: Tokenizer, now_ms: int
) -> tuple[list[schema.Event], schema.Result]:
    """The closing events and the Result of a finished sequence."""
    seq, h = run.seq, run.handoff
    events = new_events(run, tokenizer, now_ms)
    tail_start = seq.step_ends[-1] if seq.step_ends else seq.num_prompt_tokens
    tail = tokenizer.decode(seq.token_ids[tail_start:]).strip()
    if tail:  # text after the last delimiter is a last, unterminated step
        run.steps.append(tail)
        if h.params.stream != "none":
            events.append(run.event("step", now_ms, step=len(run.steps) - 1, text=tail))
    text = tokenizer.decode(seq.output_token_ids)
    answer = parse_answer(text)
    events.append(run.event("final", now_ms, text=answer or "", detail=seq.finish_reason or ""))
    start = h.created_ms or h.admitted_ms
    stop = "answer" if seq.finish_reason == "stop" else "max_tokens"
    result = schema.Result(
        id=h.id,
        status="ok",
        tenant=h.tenant,
        slo_class=h.slo.class_,
        model=h.model,
        answer=answer,
        text=text,
        steps=[schema.StepRecord(text=s) for s in run.steps],
        usage=schema.Usage(
            prompt_tokens=seq.num_prompt_tokens,
            completion_tokens=seq.num_output_tokens,
            steps=len(run.steps),
        ),
        timings=schema.Timings(
            queue_ms=max(0, h.admitted_ms - h.created_ms) if h.created_ms else None,
            ttft_ms=max(0, run.started_ms - start),
            e2e_ms=max(0, now_ms - start),
            stages={"prefill": h.prefill_ms, "decode": max(0, now_ms - run.started_ms)},
        ),
        budget=schema.BudgetReport(
            limit=seq.params.max_tokens, used=seq.num_output_tokens, stop_reason=stop
        ),
        ts_ms=now_ms,
    )
    return events, result
