"""The one place that encodes and decodes wire messages.

Decoding is strict on types, value ranges and required fields; a `v` other than SCHEMA_VERSION
is rejected. Every failure is a SchemaError whose `code` is one of SCHEMA_ERROR_CODES.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable
from typing import Any, TypeVar

import msgspec

from pipeline.errors import StepwiseError
from pipeline.schema.limits import (
    BAD_ID,
    DEFAULT_LIMITS,
    ID_CHARS,
    ID_PATTERN,
    INVALID_FIELD,
    MISSING_FIELD,
    SCHEMA_VERSION,
    TOO_LARGE,
    UNDECODABLE,
    UNSUPPORTED_CONTENT_TYPE,
    UNSUPPORTED_VERSION,
    Limits,
    SchemaError,
)
from pipeline.schema.messages import BudgetReport, DeadLetter, ErrorInfo, Job, Result

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
        num_chars = sum(len(m.content) + len(m.reasoning_content or "") for m in job.messages)
        field = "messages"
        for i, m in enumerate(job.messages):
            if m.reasoning_content is not None and m.role != "assistant":
                field = f"messages[{i}].reasoning_content"
                raise fail(INVALID_FIELD, field, f"`{field}`: only an assistant turn has reasoning")
            if m.tool_calls is not None and m.role != "assistant":
                field = f"messages[{i}].tool_calls"
                raise fail(INVALID_FIELD, field, f"`{field}`: only an assistant turn calls tools")
            if (m.role == "tool") != (m.tool_call_id is not None):
                field = f"messages[{i}].tool_call_id"
                raise fail(INVALID_FIELD, field, f"`{field}`: a tool turn, and only one, names "
                           "the call it answers")  # fmt: skip
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
    _check_template_kwargs(job.chat_template_kwargs or {}, limits, fail)


# Arguments of `apply_chat_template` itself: a template kwarg must not reach them.
RESERVED_TEMPLATE_KWARGS = frozenset(
    {"conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
     "continue_final_message", "tokenize", "padding", "truncation", "max_length",
     "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs"}
)  # fmt: skip
_TEMPLATE_KWARG = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def _check_template_kwargs(kwargs: dict, limits: Limits, fail) -> None:
    if len(kwargs) > limits.max_template_kwargs:
        raise fail(
            TOO_LARGE,
            "chat_template_kwargs",
            f"{len(kwargs)} chat_template_kwargs; the limit is {limits.max_template_kwargs}",
        )
    for key, value in kwargs.items():
        field = f"chat_template_kwargs.{key}"
        if not _TEMPLATE_KWARG.fullmatch(key) or key in RESERVED_TEMPLATE_KWARGS:
            raise fail(INVALID_FIELD, field, f"{key!r} is not a chat template variable name")
        if isinstance(value, str) and len(value) > limits.max_premise_chars:
            raise fail(
                TOO_LARGE,
                field,
                f"{len(value)} characters; the limit is {limits.max_premise_chars}",
            )


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
        error=ErrorInfo(
            code=error.code,
            message=str(error),
            field=getattr(error, "field", None),
            retry_after_s=getattr(error, "retry_after_s", None),
        ),
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
