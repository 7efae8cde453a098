"""Every wire message as a typed msgspec Struct (docs/wire-format.md).

msgpack maps keyed by field name are the wire format; JSON is accepted for Jobs. Unknown extra
fields are ignored, so a newer producer may add optional fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

from pipeline.schema.limits import (
    MAX_STEPS,
    MAX_TOKENS,
    SCHEMA_VERSION,
    TOPIC_PATTERN,
    JobId,
    Millis,
    Name,
    NonNeg,
    Positive,
    SloClass,
    Verdict,
)

# -- Job: what users publish ---------------------------------------------------------------


# A value of a chat template's own switches (vLLM's `chat_template_kwargs`: `enable_thinking`,
# `thinking`, `reasoning_effort`): scalars only.
TemplateValue = str | int | float | bool | None


ToolName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class FunctionDef(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A tool the model may call (OpenAI's `tools[].function`). Fields left at their defaults
    are not written: the chat template renders the tool as the client sent it (a `strict` or
    an empty `description` the client never wrote changes the prompt a model learned)."""

    name: ToolName
    description: str = ""
    parameters: dict[str, Any] | None = None  # a JSON schema of the arguments
    strict: bool = False


class Tool(msgspec.Struct, kw_only=True):
    type: Literal["function"] = "function"
    function: FunctionDef


class FunctionCall(msgspec.Struct, kw_only=True):
    name: str
    arguments: str  # a JSON object's text


class ToolCall(msgspec.Struct, kw_only=True):
    """A call the model made (OpenAI's `tool_calls[]`); in a Job, an earlier turn's."""

    id: Annotated[str, Meta(min_length=1, max_length=128)]
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(msgspec.Struct, kw_only=True):
    """One chat message, OpenAI-style."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    # An earlier assistant turn's thinking (vLLM's `reasoning_content` / `reasoning`): given to
    # the chat template, which keeps it (interleaved thinking) or drops it, as the model wants.
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant turn's calls
    tool_call_id: str | None = None  # a tool message: the call it answers
    name: str | None = None


# auto: the model decides; none: no calls are read; required: at least one call (forced by a
# grammar); a function's name: that call (forced).
ToolChoice = Literal["auto", "none", "required"]


class StructuredOutput(msgspec.Struct, kw_only=True):
    """What follows the thinking is held to this (engine/guided.py): `json` (a JSON schema's
    text), `json_object`, `regex`, `choice` (a JSON list of strings), `grammar` (Lark)."""

    kind: Literal["json", "json_object", "regex", "choice", "grammar"]
    spec: Annotated[str, Meta(max_length=262_144)] = ""


# off: unchecked; async: checked while decoding goes on; strict: each step waits for its
# verdict; repair: async, and a wrong arithmetic value is replaced as it is written
VerifyMode = Literal["off", "async", "strict", "repair"]
VERIFY_MODES: tuple[str, ...] = get_args(VerifyMode)


class JobParams(msgspec.Struct, kw_only=True):
    """Sampling and reasoning knobs; names and meanings follow vLLM's SamplingParams."""

    temperature: Annotated[float, Meta(ge=0.0, le=2.0)] = 1.0  # 0: greedy
    top_p: Annotated[float, Meta(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Meta(ge=-1)] = -1  # -1: off; 0 is rejected
    min_p: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0
    seed: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None  # None: ingest assigns one
    max_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS)] | None = None  # None: budget decides
    max_steps: Annotated[int, Meta(ge=1, le=MAX_STEPS)] | None = None  # None: budget decides
    # A cap on the thinking (vLLM's `thinking_token_budget`); the stamped budget still applies.
    max_thinking_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS)] | None = None
    # The same cap under its earlier name: still read (a producer of an older release), never
    # written. The tighter of the two applies (pipeline/budget/effective.py).
    thinking_budget: Annotated[int, Meta(ge=1, le=MAX_TOKENS)] | None = None
    verify: VerifyMode = "async"
    early_exit: bool = False
    stream: Literal["steps", "tokens", "none"] = "steps"


class SLO(msgspec.Struct, kw_only=True, rename={"class_": "class"}):
    """Latency class; `class` on the wire (a Python keyword, hence `class_`)."""

    class_: SloClass = "interactive"
    e2e_ms: Annotated[int, Meta(ge=1, le=86_400_000)] | None = None  # None: the class default


class Job(msgspec.Struct, kw_only=True):
    """A reasoning request; `id` is the idempotency key and the Kafka record key."""

    v: int = SCHEMA_VERSION
    id: JobId
    tenant: Name = "default"
    app: Name = "default"
    user: Name = "default"
    prompt: str | None = None  # exactly one of prompt / messages
    messages: list[Message] | None = None
    premises: list[str] = []  # claims the verifier may assume
    model: Annotated[str, Meta(min_length=1, max_length=256)] | None = None  # pool name
    params: JobParams = msgspec.field(default_factory=JobParams)
    slo: SLO = msgspec.field(default_factory=SLO)
    reply_topic: Annotated[str, Meta(pattern=TOPIC_PATTERN)] | None = None
    created_ms: NonNeg | None = None
    # Passed to the chat template as it renders the prompt (vLLM's and SGLang's field):
    # `{"enable_thinking": false}` (Qwen3), `{"thinking": true}` (DeepSeek-V3.1).
    chat_template_kwargs: dict[str, TemplateValue] | None = None
    # Tools the model may call: rendered by the chat template, calls read from the content by
    # the model's tool-call parser into Result.tool_calls (docs/gateway.md).
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | ToolName = "auto"
    parallel_tool_calls: bool = True
    structured_output: StructuredOutput | None = None


# -- internal: ingest -> prefill -> decode ----------------------------------------------------


class Budget(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A class's limits as the budget controller published them (docs/budget.md): ingest stamps
    them on a job at admission, decode re-reads them live. With no controller running, the
    pipeline's defaults: nothing below is set."""

    max_steps: Positive
    max_thinking_tokens: Positive
    probe_effort: NonNeg = 1  # early exit: probe after every n-th step (0: no probes)
    # Backtracks a job may make before resampling stops (its steps still checked and
    # reported); None: no cap beyond the pipeline's own `max_backtracks`.
    resample_cap: NonNeg | None = None
    early_exit: bool = False  # probe for an early answer even where the job did not ask
    shed: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0  # share of new jobs refused (ingest)
    retry_after_s: Annotated[float, Meta(ge=0.0)] = 0.0  # what a refused job is told
    # The class SLO: a job's deadline when it brings no `slo.e2e_ms`. 0: deadlines are not
    # enforced (no controller), so decode never cuts a job for lateness.
    slo_ms: Annotated[float, Meta(ge=0.0)] = 0.0
    pressure: Annotated[float, Meta(ge=0.0)] = 0.0  # the law's level (ladder.py), for operators
    version: NonNeg = 0  # controller state version the limits were read from


class PrefillTask(msgspec.Struct, kw_only=True):
    """A normalized, tokenized, budgeted job on its way to a prefill worker."""

    v: int = SCHEMA_VERSION
    id: JobId
    tenant: Name = "default"
    app: Name = "default"
    user: Name = "default"
    model: str
    token_ids: list[NonNeg]
    # The user's question (the prompt, or the last user message): the verifier's premise
    # source, never the rendered chat template.
    problem: str = ""
    premises: list[str] = []
    params: JobParams = msgspec.field(default_factory=JobParams)
    slo: SLO = msgspec.field(default_factory=SLO)
    budget: Budget
    reply_topic: str | None = None
    cache_key: str | None = None  # answer-cache key, so decode can store the Result
    created_ms: NonNeg | None = None
    admitted_ms: NonNeg
    # Tool calls read from the content: off; parse (the model's tool-call parser); forced (a
    # grammar made the content a JSON list of calls: tool_choice required or a named function).
    tool_calls: Literal["off", "parse", "forced"] = "off"
    structured_output: StructuredOutput | None = None  # the job's, tool_choice's grammar too


class KVDescriptor(msgspec.Struct, kw_only=True):
    """Where an exported KV buffer lives and until when; its layout is the transport's
    (pipeline/transfer: [layers, 2, kv_heads, tokens, head_dim], tokens padded to whole blocks).

    `shm_pool` lends blocks of the exporter's own pool in place instead of a buffer: `handle`
    names the pool's segment and the lease, `blocks` the sequence's block table there, and
    `block_gens` the blocks' generations (a reader checks them; see transfer/shm_pool.py).
    With `session` set the same pool is also served by Mooncake's transfer engine there
    (transfer/mooncake.py): a reader on another host reads those blocks from `pool_addr`, the
    segment's address in the exporter, whose pool holds `pool_blocks` blocks."""

    transport: Literal["shm", "shm_pool", "cuda_ipc"]
    handle: Annotated[str, Meta(min_length=1, max_length=8192)]
    num_tokens: Positive
    num_layers: Positive
    num_kv_heads: Positive
    head_dim: Positive
    dtype: Literal["float32", "bfloat16", "float16"]
    nbytes: Positive
    owner: str  # exporting worker id: only it can release the buffer
    expires_ms: NonNeg
    block_size: Positive | None = None  # shm_pool only, as are the two below
    blocks: Annotated[list[NonNeg], Meta(max_length=1 << 16)] | None = None
    block_gens: Annotated[list[int], Meta(max_length=1 << 16)] | None = None
    # shm_pool served over Mooncake too: "host:port" of the exporter's transfer engine, and
    # the segment's address and size in blocks there (virtual addresses fit 63 bits).
    session: Annotated[str, Meta(pattern=r"^[A-Za-z0-9.:\[\]-]{1,253}:[0-9]{1,5}$")] | None = None
    pool_addr: Annotated[int, Meta(gt=0, le=(1 << 63) - 1)] | None = None
    pool_blocks: Annotated[int, Meta(ge=1, le=1 << 32)] | None = None


class Handoff(PrefillTask, kw_only=True):
    """A prefilled job for decode: the task, its first token, and the KV to import."""

    first_token: NonNeg
    first_logprob: float
    kv: KVDescriptor | None = None  # None: re-prefill from token_ids
    prefill_worker: str
    prefill_ms: Millis
    seed: Annotated[int, Meta(ge=0, le=2**63 - 1)]  # sampling seed, so decode continues it


# -- outputs: events, results, dead letters ---------------------------------------------------


ClaimVerdictName = Literal["entailed", "contradicted", "consistent", "unknown", "ungrounded"]


class ClaimInfo(msgspec.Struct, kw_only=True):
    """One claim of a checked step: where it is in the step's text, and its verdict."""

    text: str
    span: tuple[NonNeg, NonNeg]  # [start, end) in the step's text
    verdict: ClaimVerdictName
    reason: str = ""  # with unknown: unparseable | unsupported | limit | timeout | ...
    kind: str = ""  # checked as: arithmetic | identity | equation | solution | binding


def claim_infos(claims: Iterable[Any]) -> list[ClaimInfo]:
    """Claims as wire structs: the checker's ClaimVerdicts, or ClaimInfos as they arrived."""
    return [
        c if isinstance(c, ClaimInfo)
        else ClaimInfo(text=c.text, span=tuple(c.span), verdict=c.verdict, reason=c.reason,
                       kind=getattr(c, "kind", ""))
        for c in claims
    ]  # fmt: skip


class VerificationReport(msgspec.Struct, kw_only=True):
    """What a job's verification covered (pipeline/verify/coverage.py). Claims count every
    check made, rolled-back attempts too; steps count the kept chain."""

    status: Literal["off", "verified", "partial", "nothing_checkable"] = "off"
    checks: NonNeg = 0
    claims: NonNeg = 0
    entailed: NonNeg = 0
    contradicted: NonNeg = 0
    consistent: NonNeg = 0
    unknown: NonNeg = 0  # read, undecided
    ungrounded: NonNeg = 0  # read and not refuted, but a number came from nowhere
    unreadable: NonNeg = 0  # not read: unparseable, unsupported, limit
    steps: NonNeg = 0
    steps_checkable: NonNeg = 0  # kept steps with at least one claim that could be read
    checkable_share: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0


class Event(msgspec.Struct, kw_only=True):
    """One streamed event of a job; `seq` counts from 0 without gaps per job."""

    v: int = SCHEMA_VERSION
    id: JobId
    seq: NonNeg
    kind: Literal[
        "accepted", "token", "step", "verdict", "backtrack", "repair", "tool_call_delta",
        "tool_call", "final", "error",
    ]  # fmt: skip
    step: NonNeg | None = None
    text: str = ""
    verdict: Verdict | None = None
    detail: str = ""
    # token events: which part of the generation the text belongs to (the model's format)
    channel: Literal["reasoning", "content"] | None = None
    claims: list[ClaimInfo] = []  # verdict events: the step's claims
    verification: VerificationReport | None = None  # the final event: what was covered
    # tool_call events: a finished call, `step` its index among the output's calls;
    # tool_call_delta events: a call being written, its id and name and the arguments' next
    # fragment (the fragments add up to the finished call's arguments)
    tool_call: ToolCall | None = None
    ts_ms: NonNeg


class RepairInfo(msgspec.Struct, kw_only=True):
    """A value verify mode `repair` replaced: `old` became `new` at text[start:end] of the
    Result's text, in the claim as the model wrote it."""

    step: NonNeg
    start: NonNeg
    end: NonNeg
    old: str
    new: str
    claim: str


class StepRecord(msgspec.Struct, kw_only=True):
    text: str
    verdict: Verdict = "unverified"
    claims: list[ClaimInfo] = []


class Usage(msgspec.Struct, kw_only=True):
    prompt_tokens: NonNeg = 0
    completion_tokens: NonNeg = 0
    reasoning_tokens: NonNeg = 0  # of the completion, the thinking's (the format's split)
    probe_tokens: NonNeg = 0  # early-exit answer probes
    wasted_tokens: NonNeg = 0  # discarded by backtracks
    steps: NonNeg = 0
    backtracks: NonNeg = 0
    # Contradicted steps kept as written because resampling was capped (the budget
    # controller, under load): checked and reported, not redone.
    unresampled: NonNeg = 0
    repairs: NonNeg = 0  # wrong values replaced in place (verify mode repair)


class Timings(msgspec.Struct, kw_only=True):
    queue_ms: Millis | None = None
    ttft_ms: Millis | None = None
    e2e_ms: Millis | None = None
    stages: dict[str, Millis] = {}


class BudgetReport(msgspec.Struct, kw_only=True):
    """What a job's budget was at its end (pipeline/budget/effective.py computes it)."""

    max_thinking_tokens: NonNeg = 0  # thinking tokens allowed at the end (its tightest)
    used: NonNeg = 0  # tokens spent: kept, discarded by backtracks, probes
    # What set the limit: the job's own caps (job), the class's live limits (class), its
    # deadline at the live pace (deadline), or the pipeline's defaults (default).
    binding: Literal["job", "class", "deadline", "default"] = "default"
    # unverified: verification kept rejecting a step, so the job stopped there (no answer)
    stop_reason: Literal["answer", "budget", "early_exit", "max_tokens", "unverified", "error"] = (
        "answer"
    )


class ErrorInfo(msgspec.Struct, kw_only=True):
    code: str
    message: str
    field: str | None = None
    retry_after_s: float | None = None  # `overloaded`: when sending it again may be admitted


class Result(msgspec.Struct, kw_only=True):
    """The one final outcome of a job."""

    v: int = SCHEMA_VERSION
    id: JobId
    status: Literal["ok", "error", "rejected", "cached"]
    tenant: Name = "default"
    slo_class: SloClass = "interactive"  # the budget controller keeps latency per class
    model: str | None = None
    answer: str | None = None
    text: str = ""
    steps: list[StepRecord] = []
    repairs: list[RepairInfo] = []  # verify mode repair: every value replaced in `text`
    usage: Usage = msgspec.field(default_factory=Usage)
    timings: Timings = msgspec.field(default_factory=Timings)
    budget: BudgetReport = msgspec.field(default_factory=BudgetReport)
    verification: VerificationReport | None = None  # None: not a decoded job (cached, error)
    reasoning: str | None = None  # the thinking, markers stripped (the format's split)
    content: str | None = None  # what follows the thinking: OpenAI's `content`
    tool_calls: list[ToolCall] = []  # read from the content (which then holds the rest)
    error: ErrorInfo | None = None
    ts_ms: NonNeg


# -- internal: decode <-> verify (Celery task argument, verdicts on a Redis stream) ----------


class VerifyRequest(msgspec.Struct, kw_only=True):
    """One step to check, with what it may assume; the task argument (JSON, for Celery)."""

    v: int = SCHEMA_VERSION
    id: JobId
    key: Annotated[str, Meta(max_length=64)]  # the step attempt the verdict answers
    step: NonNeg
    text: str
    problem: str = ""  # the user's question: its equations are premises
    premises: list[str] = []
    accepted: list[str] = []  # the chain's earlier steps
    reply_stream: str  # Redis stream of the decode worker that asked
    sent_ms: NonNeg


class VerdictMessage(msgspec.Struct, kw_only=True):
    """A checker's verdict on one step attempt, on the asking worker's Redis stream."""

    v: int = SCHEMA_VERSION
    id: JobId
    key: str
    step: NonNeg
    verdict: Verdict
    reason: str = ""  # for unknown: limit, unparseable, timeout, ...
    detail: str = ""
    claims: list[ClaimInfo] = []
    check_ms: Millis = 0.0
    worker: str = ""


class DeadLetter(msgspec.Struct, kw_only=True):
    """A message no stage could use, with where it came from and why."""

    v: int = SCHEMA_VERSION
    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    payload: bytes  # truncated to Limits.max_dead_letter_payload_bytes
    payload_bytes: NonNeg  # original size
    code: str
    message: str
    job_id: str | None = None
    stage: str = ""
    ts_ms: NonNeg
