"""Turning a decoding job into its Events, its verify requests and its one Result (plain logic)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pipeline import schema
from pipeline.decode.tool_output import CallOut, ToolOutput
from pipeline.engine.sequence import Sequence
from pipeline.engine.tokenizer import Tokenizer
from pipeline.formats import ReasoningFormat, Split, StreamSplitter
from pipeline.reasoning.driver import Outward, ReasoningDriver
from pipeline.reasoning.loop import ReasoningJob
from pipeline.reasoning.machine import Check, Note


@dataclass(slots=True)
class JobRun:
    """One job being decoded: its handoff, its place in the reasoning loop, what has been
    streamed."""

    handoff: schema.Handoff
    job: ReasoningJob  # its driver and its budget (pipeline/reasoning/loop.py)
    problem: str  # the user's question, for the verifier (its equations are premises)
    reply_stream: str  # where this worker reads verdicts
    started_ms: int
    step_key: str | None = None  # step-cache key of a reproducible job (pipeline/cache/)
    next_event: int = 1  # seq 0 is ingest's "accepted"
    emitted_tokens: int = 0  # output tokens already streamed as token events
    token_text: str = ""  # decoded text of the streamed tokens (for token deltas)
    splitter: StreamSplitter | None = None  # the format's split of the streamed text
    traced: bool = False  # its trace is sampled: the core reports TraceMarks for it
    kv_import_ms: float | None = None  # the KV import (or the failed try before a re-prefill)
    reprefill_from_ns: int | None = None  # KV not imported: prefilling again since (monotonic)
    reprefill_ms: float | None = None  # how long that took, to the first token
    tools: ToolOutput | None = None  # the job reads tool calls from its content
    # A grammar holds the output from its first token (a format without thinking): all of it
    # is content, whatever the format's split would make of it.
    all_content: bool = False

    def split(self, text: str) -> Split:
        if self.all_content:
            return Split("", text)
        return self.driver.format.split(text, self.driver.prompt_text)

    @property
    def seq(self) -> Sequence:
        return self.job.driver.seq

    @property
    def driver(self) -> ReasoningDriver:
        return self.job.driver

    def event(self, kind: str, ts_ms: int, **kw) -> schema.Event:
        ev = schema.Event(id=self.handoff.id, seq=self.next_event, kind=kind, ts_ms=ts_ms, **kw)
        self.next_event += 1
        return ev


def token_events(run: JobRun, tokenizer: Tokenizer, now_ms: int) -> list[schema.Event]:
    """Token events for the output not streamed yet (if the job streams tokens), split by the
    model's format into the thinking (`channel` reasoning) and what follows it (content). The
    format's splitter holds back a marker cut across tokens until it is whole."""
    if run.handoff.params.stream != "tokens":
        return []
    out = run.seq.output_token_ids
    text = tokenizer.decode(out)
    if text == run.token_text or text.endswith("\ufffd"):  # nothing new, or a partial character
        return []
    fmt, prompt = run.driver.format, run.driver.prompt_text
    if run.splitter is None:
        run.splitter = fmt.splitter(prompt)
    if not text.startswith(run.token_text):
        # Rolled back under what was streamed (a backtrack, a forced answer, an early exit):
        # go on from the part both share (deltas cannot be taken back; step and backtrack
        # events say what was dropped), with the split's state at that point.
        run.token_text = os.path.commonprefix([text, run.token_text])
        run.splitter = fmt.splitter(prompt)
        run.splitter.feed(run.token_text)
    delta, run.token_text, run.emitted_tokens = text[len(run.token_text) :], text, len(out)
    parts = Split("", delta) if run.all_content else run.splitter.feed(delta)
    return channel_events(run, parts, now_ms)


def channel_events(run: JobRun, parts: Split, now_ms: int) -> list[schema.Event]:
    events = []
    if parts.reasoning:
        events.append(run.event("token", now_ms, text=parts.reasoning, channel="reasoning"))
    content, calls = parts.content, []
    if run.tools is not None and content:
        content, calls = run.tools.feed(content)
    return events + content_events(run, content, calls, now_ms)


def content_events(
    run: JobRun, content: str, calls: list[CallOut], now_ms: int
) -> list[schema.Event]:
    """Content as a token event, then the tool calls' events (`tool_call_delta` for a call in
    progress, `tool_call` for a finished one; `step`: the call's index)."""
    events = [run.event("token", now_ms, text=content, channel="content")] if content else []
    return events + [run.event(kind, now_ms, step=i, tool_call=c) for kind, i, c in calls]


def outward(
    run: JobRun, outs: list[Outward], tokenizer: Tokenizer, now_ms: int
) -> tuple[list[schema.Event], list[schema.VerifyRequest]]:
    """The events and verify requests for what the reasoning driver produced."""
    h = run.handoff
    events: list[schema.Event] = []
    requests: list[schema.VerifyRequest] = []
    for o in outs:
        if isinstance(o, Check):
            requests.append(
                schema.VerifyRequest(
                    id=h.id,
                    key=o.key,
                    step=o.step,
                    text=o.text,
                    problem=run.problem,
                    premises=list(h.premises),
                    accepted=list(o.accepted),
                    reply_stream=run.reply_stream,
                    sent_ms=now_ms,
                )
            )
            continue
        assert isinstance(o, Note)
        if h.params.stream == "none":
            continue
        text = run.driver.format.strip_markers(o.text).strip()  # as shown; checked as written
        if o.kind == "step":
            events.append(run.event("step", now_ms, step=o.step, text=text))
        else:
            kw = {"step": o.step, "text": text, "verdict": o.verdict, "detail": o.detail}
            events.append(run.event(o.kind, now_ms, claims=schema.claim_infos(o.claims), **kw))
    return events, requests


def finish(
    run: JobRun, tokenizer: Tokenizer, now_ms: int
) -> tuple[list[schema.Event], schema.Result]:
    """The closing events and the Result of a finished sequence."""
    seq, h, r = run.seq, run.handoff, run.driver.reasoner
    events = token_events(run, tokenizer, now_ms)
    if run.splitter is not None:  # held back until now (a marker prefix, plain's last paragraph)
        events += channel_events(run, run.splitter.flush(), now_ms)
        if run.tools is not None:  # a call the end of the output finished, content held back
            events += content_events(run, *run.tools.flush(), now_ms)
    events += outward(run, run.driver.flush(), tokenizer, now_ms)[0]
    text = tokenizer.decode(seq.output_token_ids)
    fmt, prompt = run.driver.format, run.driver.prompt_text
    answer = None if r.gave_up else fmt.find_answer(text, prompt)
    parts = run.split(text)
    content, calls = ("" if r.gave_up else parts.content), []  # gave up: no answer to show
    if run.tools is not None and content:
        content, calls = run.tools.whole(content)
    stop = r.result_stop_reason(seq.finish_reason)
    # The engine gave up on the sequence (vLLM: the server failed its step): not an answer.
    failed = seq.finish_reason == "error"
    if failed:
        answer, stop = None, "error"
    verification = schema.VerificationReport(**r.coverage())
    events.append(
        run.event("final", now_ms, text=answer or "", detail=stop, verification=verification)
    )
    start = h.created_ms or h.admitted_ms
    result = schema.Result(
        id=h.id,
        status="error" if failed else "ok",
        error=schema.ErrorInfo(
            code="engine_error",
            message="the engine failed this job's sequence (see the decode worker's log)",
        )
        if failed
        else None,
        tenant=h.tenant,
        slo_class=h.slo.class_,
        model=h.model,
        answer=answer,
        text=text,
        reasoning=parts.reasoning,
        content=content,
        tool_calls=calls,
        steps=[step_record(s, fmt) for s in r.chain],
        repairs=repair_infos(run.driver, tokenizer),
        usage=schema.Usage(
            prompt_tokens=seq.num_prompt_tokens,
            completion_tokens=seq.num_output_tokens,
            reasoning_tokens=reasoning_tokens(tokenizer, fmt, prompt, seq.output_token_ids, parts),
            wasted_tokens=seq.num_discarded_tokens,
            probe_tokens=r.num_probe_tokens,
            steps=len(r.chain),
            backtracks=r.num_backtracks,
            unresampled=r.num_unresampled,
            repairs=r.num_repairs,
        ),
        timings=schema.Timings(
            queue_ms=max(0, h.admitted_ms - h.created_ms) if h.created_ms else None,
            ttft_ms=max(0, run.started_ms - start),
            e2e_ms=max(0, now_ms - start),
            stages=decode_stages(run, h, now_ms),
        ),
        budget=schema.BudgetReport(
            max_thinking_tokens=r.max_thinking_tokens or seq.params.max_tokens,
            used=run.driver.tokens_spent(),
            binding=run.job.binding,  # type: ignore[arg-type]
            stop_reason=stop,  # type: ignore[arg-type]
        ),
        verification=verification,
        ts_ms=now_ms,
    )
    return events, result


def reasoning_tokens(
    tokenizer: Tokenizer, fmt: ReasoningFormat, prompt: str, output: list[int], parts: Split
) -> int:
    """OpenAI's `completion_tokens_details.reasoning_tokens`: the output tokens read while the
    thinking was open (the format counts them). A format without markers (the split of
    `plain`, `tiny` depends on what follows) counts its thinking's text re-encoded."""
    texts = tokenizer.token_texts()
    count = fmt.count_reasoning_tokens((texts[i] for i in output), prompt)
    if count is None:
        count = (
            len(tokenizer.encode(parts.reasoning, add_special_tokens=False))
            if parts.reasoning
            else 0
        )
    return min(count, len(output))


def decode_stages(run: JobRun, h: schema.Handoff, now_ms: int) -> dict[str, float]:
    """The Result's per-stage times: prefill, decode, and within decode the KV import and,
    when the KV could not come, the prefill done again."""
    stages = {"prefill": float(h.prefill_ms), "decode": float(max(0, now_ms - run.started_ms))}
    if run.kv_import_ms is not None:
        stages["kv_import"] = round(run.kv_import_ms, 3)
    if run.reprefill_ms is not None:
        stages["reprefill"] = round(run.reprefill_ms, 3)
    return stages


def repair_infos(driver: ReasoningDriver, tokenizer: Tokenizer) -> list[schema.RepairInfo]:
    """The repairs still in the final text, each with where its new value stands in it."""
    if driver.watch is None:
        return []
    seq = driver.seq
    spans = driver.watch.spans(tokenizer.decode, seq.output_token_ids, seq.num_prompt_tokens)
    return [
        schema.RepairInfo(step=m.step, start=at, end=at + len(m.new), old=m.old, new=m.new,
                          claim=m.claim)
        for m, at in spans
    ]  # fmt: skip


def step_record(step, fmt) -> schema.StepRecord:
    verdict = step.verdict or "unknown"
    text = fmt.strip_markers(step.text).strip()
    return schema.StepRecord(text=text, verdict=verdict, claims=schema.claim_infos(step.claims))
