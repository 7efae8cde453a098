"""Every wire message as a typed msgspec Struct, and the one place that encodes and decodes them.

msgpack maps keyed by field name are the wire format; JSON is accepted for Jobs. Decoding is
strict on types, value ranges and required fields; unknown extra fields are ignored, so a newer
producer may add optional fields; a `v` other than SCHEMA_VERSION is rejected. Every failure is a
SchemaError whose `code` is one of SCHEMA_ERROR_CODES. The field reference is docs/wire-format.md.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

from pipeline.errors import StepwiseError

SCHEMA_VERSION = 1

ID_CHARS = "[A-Za-z0-9._:-]"
ID_PATTERN = rf"^{ID_CHARS}{{1,128}}$"
NAME_PATTERN = rf"^{ID_CHARS}{{1,64}}$"
TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"  # Kafka's own rule for topic names
MAX_TOKENS = 32768
MAX_STEPS = 4096

JobId = Annotated[str, Meta(pattern=ID_PATTERN)]
Name = Annotated[str, Meta(pattern=NAME_PATTERN)]
NonNeg = Annotated[int, Meta(ge=0)]
Positive = Annotated[int, Meta(ge=1)]
Millis = Annotated[float, Meta(ge=0.0)]
Verdict = Literal["entailed", "contradicted", "consistent", "no_claim", "unknown", "unverified"]
SloClass = Literal["interactive", "batch"]

# -- errors and limits -------------------------------------------------------------------------

UNDECODABLE = "undecodable"  # not msgpack/JSON, trailing bytes, or not a map at the top
UNSUPPORTED_CONTENT_TYPE = "unsupported_content_type"
UNSUPPORTED_VERSION = "unsupported_version"
TOO_LARGE = "too_large"  # message bytes, prompt chars, message or premise counts and lengths
MISSING_FIELD = "missing_field"
INVALID_FIELD = "invalid_field"  # wrong type, out of range, unknown enum value, conflicting fields
BAD_ID = "bad_id"  # the job id is not 1-128 characters of [A-Za-z0-9._:-]
SCHEMA_ERROR_CODES = (
    UNDECODABLE,
    UNSUPPORTED_CONTENT_TYPE,
    UNSUPPORTED_VERSION,
    TOO_LARGE,
    MISSING_FIELD,
    INVALID_FIELD,
    BAD_ID,
)


class SchemaError(StepwiseError):
    """A message that breaks the wire contract; `job_id` is set when the id could still be read."""

    code = INVALID_FIELD

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        job_id: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.field = field  # wire path such as "params.temperature" or "messages[0].role"
        self.job_id = job_id


@dataclass(slots=True, frozen=True)
class Limits:
    """Size limits applied while decoding; oversize input fails with code `too_large`."""

    max_message_bytes: int = 1 << 20  # a Job, checked before decoding
    max_internal_bytes: int = 8 << 20  # stage-to-stage messages (token ids, long results)
    max_prompt_chars: int = 65536  # the prompt, or all message contents together
    max_messages: int = 256
    max_premises: int = 64
    max_premise_chars: int = 2048
    max_dead_letter_payload_bytes: int = 64 << 10
    max_peek_bytes: int = 16 << 20  # oversize input up to this size is still read for its id

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)}")


DEFAULT_LIMITS = Limits()

# -- Job: what users publish ---------------------------------------------------------------


class Message(msgspec.Struct, kw_only=True):
    """One chat message, OpenAI-style."""

    role: Literal["system", "user", "assistant"]
    content: str


class JobParams(msgspec.Struct, kw_only=True):
    """Sampling and reasoning knobs; names and meanings follow vLLM's SamplingParams."""

    temperature: Annotated[float, Meta(ge=0.0, le=2.0)] = 1.0  # 0: greedy
    top_p: Annotated[float, Meta(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Meta(ge=-1)] = -1  # -1: off; 0 is rejected
    min_p: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0
    seed: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None  # None: ingest assigns one
    max_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS)] | None = None  # None: budget decides
    max_steps: Annotated[int, Meta(ge=1, le=MAX_STEPS)] | None = None  # None: budget decides
    # vLLM's thinking_token_budget: a cap on the thinking (the stamped budget still applies)
    thinking_budget: Annotated[int, Meta(ge=1, le=MAX_TOKENS)] | None = None
    verify: Literal["off", "async", "strict"] = "async"
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


# -- internal: ingest -> prefill -> decode ----------------------------------------------------


class Budget(msgspec.Struct, kw_only=True):
    """The thinking budget ingest stamps from the controller's live limits."""

    max_steps: Positive
    max_thinking_tokens: Positive
    probe_effort: NonNeg = 1  # early exit: probe after every n-th step (0: no probes)
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


class KVDescriptor(msgspec.Struct, kw_only=True):
    """Where an exported KV buffer lives and until when; its layout is the transport's
    (pipeline/transfer: [layers, 2, kv_heads, tokens, head_dim], tokens padded to whole blocks).

    `shm_pool` lends blocks of the exporter's own pool in place instead of a buffer: `handle`
    names the pool's segment and the lease, `blocks` the sequence's block table there, and
    `block_gens` the blocks' generations (a reader checks them; see transfer/shm_pool.py)."""

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


class Handoff(PrefillTask, kw_only=True):
    """A prefilled job for decode: the task, its first token, and the KV to import."""

    first_token: NonNeg
    first_logprob: float
    kv: KVDescriptor | None = None  # None: re-prefill from token_ids
    prefill_worker: str
    prefill_ms: Millis
    seed: Annotated[int, Meta(ge=0, le=2**63 - 1)]  # sampling seed, so decode continues it


# -- outputs: events, results, dead letters ---------------------------------------------------


ClaimVerdictName = Literal["entailed", "contradicted", "consistent", "unknown"]


class ClaimInfo(msgspec.Struct, kw_only=True):
    """One claim of a checked step: where it is in the step's text, and its verdict."""

    text: str
    span: tuple[NonNeg, NonNeg]  # [start, end) in the step's text
    verdict: ClaimVerdictName
    reason: str = ""  # with unknown: unparseable | unsupported | limit | timeout | ...


def claim_infos(claims: Iterable[Any]) -> list[ClaimInfo]:
    """Claims as wire structs: the checker's ClaimVerdicts, or ClaimInfos as they arrived."""
    return [
        c if isinstance(c, ClaimInfo)
        else ClaimInfo(text=c.text, span=tuple(c.span), verdict=c.verdict, reason=c.reason)
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
    unreadable: NonNeg = 0  # not read: unparseable, unsupported, limit
    steps: NonNeg = 0
    steps_checkable: NonNeg = 0  # kept steps with at least one claim that could be read
    checkable_share: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0


class Event(msgspec.Struct, kw_only=True):
    """One streamed event of a job; `seq` counts from 0 without gaps per job."""

    v: int = SCHEMA_VERSION
    id: JobId
    seq: NonNeg
    kind: Literal["accepted", "token", "step", "verdict", "backtrack", "final", "error"]
    step: NonNeg | None = None
    text: str = ""
    verdict: Verdict | None = None
    detail: str = ""
    # token events: which part of the generation the text belongs to (the model's format)
    channel: Literal["reasoning", "content"] | None = None
    claims: list[ClaimInfo] = []  # verdict events: the step's claims
    verification: VerificationReport | None = None  # the final event: what was covered
    ts_ms: NonNeg


class StepRecord(msgspec.Struct, kw_only=True):
    text: str
    verdict: Verdict = "unverified"
    claims: list[ClaimInfo] = []


class Usage(msgspec.Struct, kw_only=True):
    prompt_tokens: NonNeg = 0
    completion_tokens: NonNeg = 0
    probe_tokens: NonNeg = 0  # early-exit answer probes
    wasted_tokens: NonNeg = 0  # discarded by backtracks
    steps: NonNeg = 0
    backtracks: NonNeg = 0


class Timings(msgspec.Struct, kw_only=True):
    queue_ms: Millis | None = None
    ttft_ms: Millis | None = None
    e2e_ms: Millis | None = None
    stages: dict[str, Millis] = {}


class BudgetReport(msgspec.Struct, kw_only=True):
    limit: NonNeg = 0  # thinking tokens allowed
    used: NonNeg = 0
    # unverified: verification kept rejecting a step, so the job stopped there (no answer)
    stop_reason: Literal["answer", "budget", "early_exit", "max_tokens", "unverified", "error"] = (
        "answer"
    )


class ErrorInfo(msgspec.Struct, kw_only=True):
    code: str
    message: str
    field: str | None = None


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
    usage: Usage = msgspec.field(default_factory=Usage)
    timings: Timings = msgspec.field(default_factory=Timings)
    budget: BudgetReport = msgspec.field(default_factory=BudgetReport)
    verification: VerificationReport | None = None  # None: not a decoded job (cached, error)
    reasoning: str | None = None  # the thinking, markers stripped (the format's split)
    content: str | None = None  # what follows the thinking: OpenAI's `content`
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


# -- encode / decode --------------------------------------------------------------------------

T = TypeVar("T", bound=msgspec.Struct)
_JSON_TYPES = frozenset({"application/json", "text/json"})
_MSGPACK_TYPES = frozenset(
    {"application/msgpack", "application/x-msgpack", "application/vnd.msgpack"}
)
_ERROR_AT = re.compile(r"^(?P<text>.*?)(?: - at `\$(?P<path>.*)`)?$", re.S)
_FIELD_HINTS = {
    "id": f"must be 1-128 characters from {ID_CHARS}",
    "tenant": f"must be 1-64 characters from {ID_CHARS}",
    "app": f"must be 1-64 characters from {ID_CHARS}",
    "user": f"must be 1-64 characters from {ID_CHARS}",
    "reply_topic": "must be a Kafka topic name: 1-249 characters from [A-Za-z0-9._-]",
}
_msgpack_encoder = msgspec.msgpack.Encoder()
_json_encoder = msgspec.json.Encoder()


class _Envelope(msgspec.Struct):
    """Just enough of any message to report its id and version when the rest is bad."""

    id: Any = None
    v: Any = None


@functools.cache
def _decoder(fmt: str, type_: type) -> msgspec.msgpack.Decoder | msgspec.json.Decoder:
    return msgspec.json.Decoder(type_) if fmt == "json" else msgspec.msgpack.Decoder(type_)


def encode(msg: msgspec.Struct) -> bytes:
    """msgpack bytes for any wire message."""
    return _msgpack_encoder.encode(msg)


def encode_json(msg: msgspec.Struct) -> bytes:
    return _json_encoder.encode(msg)


def content_type_of(headers: Iterable[tuple[str, bytes | str | None]] | None) -> str | None:
    """The `content-type` Kafka header (any case), as text, or None."""
    for key, value in headers or ():
        if key.lower() == "content-type" and value is not None:
            return value.decode("latin-1") if isinstance(value, bytes) else value
    return None


def _wire_format(data: bytes, content_type: str | bytes | None) -> str:
    if isinstance(content_type, bytes):
        content_type = content_type.decode("latin-1")
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in _JSON_TYPES:
        return "json"
    if media in _MSGPACK_TYPES:
        return "msgpack"
    if media:
        raise SchemaError(
            f"unsupported content-type {content_type!r}: use application/json or "
            "application/msgpack (or no header for msgpack)",
            code=UNSUPPORTED_CONTENT_TYPE,
        )
    # No header: a msgpack map never starts with '{' or whitespace, so JSON is unambiguous.
    return "json" if data[:64].lstrip()[:1] == b"{" else "msgpack"


def _valid_id(value: Any) -> str | None:
    return value if isinstance(value, str) and re.fullmatch(ID_PATTERN, value) else None


def _peek(data: bytes, fmt: str) -> _Envelope | None:
    try:
        return _decoder(fmt, _Envelope).decode(data)
    except Exception:  # best effort by contract: garbage has no id
        return None


def peek_job_id(
    data: bytes, content_type: str | bytes | None = None, limits: Limits = DEFAULT_LIMITS
) -> str | None:
    """The message's id if it is a valid id, else None. Never raises."""
    if len(data) > limits.max_peek_bytes:
        return None
    try:
        fmt = _wire_format(data, content_type)
    except SchemaError:
        fmt = "json" if data[:64].lstrip()[:1] == b"{" else "msgpack"
    env = _peek(data, fmt)
    return _valid_id(env.id) if env is not None else None


def _check_version(v: Any, job_id: str | None) -> None:
    if type(v) is not int or v != SCHEMA_VERSION:
        raise SchemaError(
            f"unsupported schema version v={v!r}; this build reads v={SCHEMA_VERSION}",
            code=UNSUPPORTED_VERSION,
            field="v",
            job_id=job_id,
        )


def _to_schema_error(exc: Exception, data: bytes, fmt: str) -> SchemaError:
    """Map a msgspec failure to a code and the wire path of the offending field."""
    env = _peek(data, fmt)
    job_id = _valid_id(env.id) if env is not None else None
    if env is not None and env.v is not None:
        try:
            _check_version(env.v, job_id)  # a newer version may fail v1 checks: report the version
        except SchemaError as version_error:
            return version_error
    if not isinstance(exc, msgspec.ValidationError):
        return SchemaError(f"cannot decode {fmt}: {exc}", code=UNDECODABLE, job_id=job_id)
    match = _ERROR_AT.match(str(exc))
    text, path = match["text"], (match["path"] or "").lstrip(".")
    if text.startswith("Object missing required field `"):
        name = text.split("`")[1]
        field = f"{path}.{name}" if path else name
        return SchemaError(
            f"missing required field `{field}`", code=MISSING_FIELD, field=field, job_id=job_id
        )
    if not path:
        return SchemaError(f"expected a map of fields: {text}", code=UNDECODABLE, job_id=job_id)
    hint = _FIELD_HINTS.get(path)
    message = f"`{path}` {hint} ({text})" if hint else f"`{path}`: {text}"
    return SchemaError(
        message, code=BAD_ID if path == "id" else INVALID_FIELD, field=path, job_id=job_id
    )


def _decode(data: bytes, type_: type[T], fmt: str) -> T:
    try:
        msg = _decoder(fmt, type_).decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:  # ValidationError is a DecodeError
        raise _to_schema_error(exc, data, fmt) from None
    _check_version(msg.v, getattr(msg, "id", None))
    return msg


def decode_job(
    data: bytes, content_type: str | bytes | None = None, limits: Limits = DEFAULT_LIMITS
) -> Job:
    """A validated Job from msgpack, or from JSON (that content-type, or a leading '{')."""
    if len(data) > limits.max_message_bytes:
        job_id = peek_job_id(data, content_type, limits)
        raise SchemaError(
            f"message is {len(data)} bytes; the limit is {limits.max_message_bytes}",
            code=TOO_LARGE,
            job_id=job_id,
        )
    job = _decode(data, Job, _wire_format(data, content_type))
    validate_job(job, limits)
    return job


def validate_job(job: Job, limits: Limits = DEFAULT_LIMITS) -> None:
    """The checks a type cannot express: one of prompt/messages, top_k, size limits."""

    def fail(code: str, field: str, message: str) -> SchemaError:
        return SchemaError(message, code=code, field=field, job_id=job.id)

    if job.prompt is None and job.messages is None:
        raise fail(MISSING_FIELD, "prompt", "give `prompt` or `messages`")
    if job.prompt is not None and job.messages is not None:
        raise fail(INVALID_FIELD, "prompt", "give `prompt` or `messages`, not both")
    if job.prompt is not None:
        if not job.prompt:
            raise fail(INVALID_FIELD, "prompt", "`prompt` must not be empty")
        num_chars = len(job.prompt)
        field = "prompt"
    else:
        if not job.messages:
            raise fail(INVALID_FIELD, "messages", "`messages` must not be empty")
        if len(job.messages) > limits.max_messages:
            raise fail(
                TOO_LARGE,
                "messages",
                f"{len(job.messages)} messages; the limit is {limits.max_messages}",
            )
        num_chars = sum(len(m.content) for m in job.messages)
        field = "messages"
    if num_chars > limits.max_prompt_chars:
        raise fail(
            TOO_LARGE,
            field,
            f"{field} has {num_chars} characters; the limit is {limits.max_prompt_chars}",
        )
    if len(job.premises) > limits.max_premises:
        raise fail(
            TOO_LARGE,
            "premises",
            f"{len(job.premises)} premises; the limit is {limits.max_premises}",
        )
    for i, premise in enumerate(job.premises):
        if len(premise) > limits.max_premise_chars:
            raise fail(
                TOO_LARGE,
                f"premises[{i}]",
                f"premise has {len(premise)} characters; the limit is {limits.max_premise_chars}",
            )
    if job.params.top_k == 0:
        raise fail(INVALID_FIELD, "params.top_k", "`params.top_k` must be -1 (off) or >= 1, got 0")


def decode(data: bytes, type_: type[T], limits: Limits = DEFAULT_LIMITS, fmt: str = "msgpack") -> T:
    """A stage-to-stage message (msgpack, or `fmt="json"`) of the given type; Jobs go through
    decode_job."""
    if type_ is Job:
        return decode_job(data, limits=limits)  # type: ignore[return-value]
    if len(data) > limits.max_internal_bytes:
        raise SchemaError(
            f"{type_.__name__} is {len(data)} bytes; the limit is {limits.max_internal_bytes}",
            code=TOO_LARGE,
            job_id=peek_job_id(data, limits=limits),
        )
    return _decode(data, type_, fmt)


def _now_ms() -> int:
    return int(time.time() * 1000)


def rejected_result(
    job_id: str, error: StepwiseError, *, tenant: str = "default", ts_ms: int | None = None
) -> Result:
    """The Result for a job refused before it ran (schema, prompt length, admission)."""
    return Result(
        id=job_id,
        status="rejected",
        tenant=tenant,
        budget=BudgetReport(stop_reason="error"),
        error=ErrorInfo(code=error.code, message=str(error), field=getattr(error, "field", None)),
        ts_ms=_now_ms() if ts_ms is None else ts_ms,
    )


def dead_letter(
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    payload: bytes,
    error: StepwiseError,
    stage: str = "",
    ts_ms: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> DeadLetter:
    """A DeadLetter for a message that failed, its payload cut to the configured size."""
    return DeadLetter(
        topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        payload=bytes(payload[: limits.max_dead_letter_payload_bytes]),
        payload_bytes=len(payload),
        code=error.code,
        message=str(error),
        job_id=getattr(error, "job_id", None),
        stage=stage,
        ts_ms=_now_ms() if ts_ms is None else ts_ms,
    )
