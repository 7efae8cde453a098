"""OpenAI-compatible `/v1/models` and `/v1/chat/completions` (stream and non-stream).

The thinking goes to `reasoning_content` and `reasoning` (vLLM renamed the field; clients read
either), what follows it to `content`: the model's reasoning format splits the generation
(docs/reasoning-formats.md), in decode, where the rendered prompt is known (a template that
opens the thinking itself). Non-stream: the Result's split. Stream: the job streams tokens,
each delta tagged with its part by the format's streaming splitter (a marker cut across tokens
is held until it is whole); a backtrack is shown as a marker line, since deltas cannot retract.

The ecosystem's reasoning fields, by vLLM's and SGLang's names: `chat_template_kwargs` go to the
chat template (`enable_thinking`, `thinking`); `reasoning_effort` caps the thinking (from
EFFORT_BUDGETS), goes to the template, and `none` switches thinking off there; vLLM's
`thinking_token_budget` caps the thinking; vLLM's `include_reasoning: false` leaves the thinking
out of the response, SGLang's `separate_reasoning: false` sends the generation unsplit as the
content and `stream_reasoning: false` sends the thinking in one delta once it is over; an
earlier assistant turn's `reasoning_content` (or `reasoning`) goes to the template, which keeps
or drops it; `usage.completion_tokens_details.reasoning_tokens` counts the thinking. A field
this gateway does not implement is a 400 naming it, never silently ignored.

Tools and structured output (docs/gateway.md): `tools`, `tool_choice`, `parallel_tool_calls`,
earlier turns' `tool_calls` and `role: "tool"` results go to the chat template; calls come back
as `message.tool_calls` (streamed: `delta.tool_calls`, id and name first, then argument fragments)
with `finish_reason: "tool_calls"`. `response_format` (`json_object`, `json_schema`) and vLLM's
`structured_outputs` (`json`, `regex`, `choice`, `grammar`) hold what follows the thinking to a
grammar; an invalid one is a 400 with llguidance's reason.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from fastapi import APIRouter, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict

from pipeline import schema
from pipeline.engine.grammar import compile_grammar
from pipeline.errors import InvalidRequestError
from pipeline.gateway.deps import GatewayDep, TenantDep
from pipeline.gateway.hub import Subscription
from pipeline.gateway.jobs_api import json_response
from pipeline.gateway.service import Gateway, GatewayError, new_job_id, result_error

router = APIRouter()
FINISH_REASONS = {"answer": "stop", "early_exit": "stop", "unverified": "stop"}
# reasoning_effort -> thinking tokens; `none` caps nothing but turns the template's thinking off.
EFFORT_BUDGETS = {"none": None, "minimal": 64, "low": 256, "medium": 1024, "high": 4096}
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
         "tool": "tool"}  # fmt: skip
MESSAGE_FIELDS = {"name", "tool_calls", "tool_call_id", *("reasoning_content", "reasoning")}
# vLLM's `structured_outputs` keys -> StructuredOutput kinds
STRUCTURED_KEYS = {"json": "json", "regex": "regex", "choice": "choice", "grammar": "grammar",
                   "json_object": "json_object"}  # fmt: skip
# OpenAI fields that change nothing a client gets back here (metadata), accepted and unused.
IGNORED_FIELDS = frozenset({"user", "metadata", "store"})
REASONING_FIELDS = ("reasoning_content", "reasoning")  # a message's thinking, both names


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The subset of OpenAI's request that maps onto a Job; another field is a 400."""

    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[ChatMessage]
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    n: int = 1
    thinking_token_budget: int | None = None  # vLLM's name
    reasoning_effort: str | None = None  # none | minimal | low | medium | high
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's and SGLang's
    include_reasoning: bool = True  # vLLM's: false leaves the thinking out
    separate_reasoning: bool = True  # SGLang's: false sends the generation unsplit
    stream_reasoning: bool = True  # SGLang's: false sends the thinking in one delta at its end
    verify: str | None = None  # Stepwise's extension (extra_body): off | async | strict | repair
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None  # vLLM's


def bad_request(message: str, field: str | None = None) -> GatewayError:
    return GatewayError(message, code="invalid_request_error", status=400, field=field)


def _text(content: str | list[dict[str, Any]] | None) -> str:
    if isinstance(content, list):  # content parts: only text is understood
        return "".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content or ""


def _message(i: int, m: ChatMessage) -> dict[str, Any]:
    if m.role not in ROLES:
        raise bad_request(f"role {m.role!r} is not supported", f"messages[{i}].role")
    extra = dict(m.model_extra or {})
    unknown = sorted(set(extra) - MESSAGE_FIELDS)
    if unknown:
        raise bad_request(f"{unknown[0]!r} is not supported", f"messages[{i}].{unknown[0]}")
    msg: dict[str, Any] = {"role": ROLES[m.role], "content": _text(m.content)}
    for key in ("tool_calls", "tool_call_id", "name"):
        if extra.get(key) is not None:
            msg[key] = extra[key]
    if "tool_calls" in extra and m.role != "assistant":
        raise bad_request("only an assistant message carries tool_calls",
                          f"messages[{i}].tool_calls")  # fmt: skip
    if m.role == "tool" and not isinstance(extra.get("tool_call_id"), str):
        raise bad_request("a tool message needs the `tool_call_id` it answers",
                          f"messages[{i}].tool_call_id")  # fmt: skip
    # An earlier turn's thinking, under either name: the template keeps it or drops it.
    for name in (f for f in REASONING_FIELDS if extra.get(f) is not None):
        if ROLES[m.role] != "assistant" or not isinstance(extra[name], str):
            raise bad_request(
                "only an assistant message carries reasoning, as text", f"messages[{i}].{name}"
            )
        msg.setdefault("reasoning_content", extra[name])
    return msg


def template_kwargs(req: ChatRequest) -> dict[str, Any] | None:
    """The chat template's variables: the request's own, and `reasoning_effort` as vLLM
    passes it (the value, and `enable_thinking` unless the request set it)."""
    kwargs = dict(req.chat_template_kwargs or {})
    for key, value in kwargs.items():
        if not isinstance(value, str | int | float | bool | None):
            raise bad_request(
                "a chat template variable must be a scalar", f"chat_template_kwargs.{key}"
            )
    if req.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", req.reasoning_effort)
        kwargs.setdefault("enable_thinking", req.reasoning_effort != "none")
    return kwargs or None


def tool_choice(req: ChatRequest) -> str | None:
    """OpenAI's tool_choice as the Job's: `auto` / `none` / `required`, or a function's name."""
    choice = req.tool_choice
    if choice is None or isinstance(choice, str):
        if choice not in (None, "auto", "none", "required"):
            raise bad_request("tool_choice must be auto, none, required or a function",
                              "tool_choice")  # fmt: skip
        return choice
    name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
    if not isinstance(name, str):
        raise bad_request('a named tool_choice is {"type": "function", "function": {"name": ..}}',
                          "tool_choice")  # fmt: skip
    return name


def structured_output(req: ChatRequest) -> dict[str, str] | None:
    """`response_format` or vLLM's `structured_outputs` as the Job's StructuredOutput, checked
    here (llguidance compiles it) so a bad one is a 400 with the reason."""
    if req.response_format is not None and req.structured_outputs is not None:
        raise bad_request("give response_format or structured_outputs, not both",
                          "structured_outputs")  # fmt: skip
    field, kind, spec = "response_format", None, None
    if (rf := req.response_format) is not None:
        kind = rf.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            spec = None
        elif kind == "json_schema":
            inner = rf.get("json_schema")
            if not isinstance(inner, dict) or not isinstance(inner.get("schema"), dict):
                raise bad_request("json_schema needs a `schema` object",
                                  "response_format.json_schema")  # fmt: skip
            kind, spec = "json", inner["schema"]
        else:
            raise bad_request("response_format.type must be text, json_object or json_schema",
                              "response_format.type")  # fmt: skip
    elif (so := req.structured_outputs) is not None:
        field = "structured_outputs"
        given = [k for k in so if so[k] is not None]
        if len(given) != 1 or given[0] not in STRUCTURED_KEYS:
            raise bad_request(f"structured_outputs takes one of {', '.join(STRUCTURED_KEYS)}",
                              field)  # fmt: skip
        kind, spec = STRUCTURED_KEYS[given[0]], so[given[0]]
    else:
        return None
    try:
        compile_grammar(kind, spec)
    except InvalidRequestError as exc:
        raise bad_request(str(exc), field) from None
    text = spec if isinstance(spec, str) else "" if spec is None else json.dumps(spec)
    return {"kind": kind, "spec": text}


def to_job(req: ChatRequest, model_name: str) -> schema.Job:
    if req.model != model_name:
        raise GatewayError(
            f"model {req.model!r} does not exist; this gateway serves {model_name!r}",
            code="model_not_found",
            status=404,
            field="model",
        )
    if req.n != 1:
        raise bad_request("only n=1 is supported", "n")
    unknown = sorted(set(req.model_extra or {}) - IGNORED_FIELDS)
    if unknown:
        raise bad_request(f"{unknown[0]!r} is not supported by this gateway", unknown[0])
    if req.stream and not req.separate_reasoning:
        # Token events carry the split parts, not the markers between them.
        raise bad_request(
            "separate_reasoning=false is supported without stream", "separate_reasoning"
        )
    messages = [_message(i, m) for i, m in enumerate(req.messages)]
    if req.reasoning_effort is not None and req.reasoning_effort not in EFFORT_BUDGETS:
        raise bad_request(
            f"reasoning_effort must be one of {', '.join(EFFORT_BUDGETS)}", "reasoning_effort"
        )
    thinking = req.thinking_token_budget
    if (effort := EFFORT_BUDGETS.get(req.reasoning_effort or "")) is not None:
        thinking = effort if thinking is None else min(thinking, effort)
    params = {
        k: v
        for k, v in {
            "temperature": req.temperature,
            "top_p": req.top_p,
            "seed": req.seed,
            "max_tokens": req.max_completion_tokens or req.max_tokens,
            "max_thinking_tokens": thinking,
            "verify": req.verify,
            "stream": "tokens" if req.stream else None,
        }.items()
        if v is not None
    }
    body = {"id": f"chatcmpl-{new_job_id()[3:]}", "messages": messages, "params": params}
    if (kwargs := template_kwargs(req)) is not None:
        body["chat_template_kwargs"] = kwargs
    if req.tools is not None:
        body["tools"] = req.tools
    if (choice := tool_choice(req)) is not None:
        body["tool_choice"] = choice
    body["parallel_tool_calls"] = req.parallel_tool_calls
    if (so := structured_output(req)) is not None:
        body["structured_output"] = so
    try:
        return schema.decode_job(msgspec.json.encode(body), "application/json")
    except schema.SchemaError as exc:
        raise bad_request(str(exc), exc.field) from None


def answer_text(result: schema.Result) -> str:
    """OpenAI's `content`: what follows the thinking (the format's split); for a Result from
    before the split (an older cached one), the `Answer:` line, else the answer."""
    if result.content is not None:
        return result.content
    for line in reversed(result.text.splitlines()):
        if line.strip().startswith("Answer:"):
            return line.strip()
    return f"Answer: {result.answer}" if result.answer is not None else ""


def reasoning_text(result: schema.Result) -> str | None:
    if result.reasoning is not None:
        return result.reasoning or None
    return "\n".join(s.text for s in result.steps) or None


def response_message(req: ChatRequest, result: schema.Result) -> dict[str, Any]:
    """The non-stream message, shaped by the request's reasoning fields."""
    if not req.separate_reasoning:  # SGLang's: the generation as written, markers and all
        return {"role": "assistant", "content": result.text}
    reasoning = reasoning_text(result) if req.include_reasoning else None
    content: str | None = answer_text(result)
    message = {"role": "assistant", "content": content, "reasoning_content": reasoning,
               "reasoning": reasoning}  # fmt: skip
    if result.tool_calls:
        message["tool_calls"] = [msgspec.to_builtins(c) for c in result.tool_calls]
        message["content"] = content or None  # OpenAI's: null beside calls when there is none
    return message


def usage(result: schema.Result) -> dict[str, Any]:
    u = result.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    }


def check_result(result: schema.Result) -> None:
    if result.status in ("rejected", "error"):
        raise result_error(result)


def finish_reason(result: schema.Result) -> str:
    if result.tool_calls:
        return "tool_calls"
    return FINISH_REASONS.get(result.budget.stop_reason, "length")


def tool_call_deltas(index: int, call: schema.ToolCall, head: bool = True) -> list[dict[str, Any]]:
    """A call (or a fragment of one) as vLLM streams it: id, type and name first, then its
    arguments."""
    out = []
    if head:
        first = {"index": index, "id": call.id, "type": "function",
                 "function": {"name": call.function.name, "arguments": ""}}  # fmt: skip
        out.append({"tool_calls": [first]})
    if call.function.arguments:
        args = {"index": index, "function": {"arguments": call.function.arguments}}
        out.append({"tool_calls": [args]})
    return out


CALL_EVENTS = ("tool_call_delta", "tool_call")


def call_event_deltas(event: schema.Event, started: set[int]) -> list[dict[str, Any]]:
    """A tool-call event as `delta.tool_calls`: a call being written (`tool_call_delta`) opens
    with its id and name, then its argument fragments; a finished call (`tool_call`) is sent
    whole unless its fragments came. `started`: the calls opened so far (updated)."""
    index, call = event.step or 0, event.tool_call
    if call is None:
        return []
    if event.kind == "tool_call_delta":
        out = tool_call_deltas(index, call, head=index not in started)
        started.add(index)
        return out
    return [] if index in started else tool_call_deltas(index, call)


async def _result_of(sub: Subscription, grace_s: float) -> schema.Result:
    async for item in sub.items(grace_s):
        if isinstance(item, schema.Result):
            return item
    raise GatewayError("the job ended without a Result", code="internal", status=500)


@router.get("/v1/models")
async def models(gw: GatewayDep, tenant: TenantDep):
    card = {"id": gw.config.model_name, "object": "model", "created": 0, "owned_by": "stepwise"}
    return json_response({"object": "list", "data": [card]})


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatRequest, gw: GatewayDep, tenant: TenantDep) -> Response:
    job = to_job(req, gw.config.model_name)
    sub = await gw.submit_and_follow(job, tenant)
    created = int(time.time())
    if req.stream:
        chunks = _chunks(gw, sub, job.id, req, created)
        return StreamingResponse(chunks, media_type="text/event-stream")
    try:
        result = await _wait(gw, sub)
    finally:
        gw.hub.unsubscribe(sub)
    check_result(result)
    message = response_message(req, result)
    choice = {"index": 0, "message": message, "finish_reason": finish_reason(result)}
    body = {
        "id": job.id,
        "object": "chat.completion",
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": usage(result),
    }
    return json_response(body)


async def _wait(gw: Gateway, sub: Subscription) -> schema.Result:
    try:
        return await asyncio.wait_for(
            _result_of(sub, gw.config.final_grace_s), gw.config.result_timeout_s
        )
    except TimeoutError:
        raise GatewayError("no Result in time", code="timeout", status=504) from None


def _sse(obj: object) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


class StreamDeltas:
    """A job's streamed parts as chunk deltas, shaped by the request's reasoning fields: the
    thinking left out (`include_reasoning: false`) or held until it is over
    (`stream_reasoning: false`: sent in one delta before the first content)."""

    def __init__(self, req: ChatRequest) -> None:
        self.req = req
        self.held: list[str] = []
        self.thinking_over = req.stream_reasoning  # streamed as it comes: nothing to hold

    def reasoning(self, text: str) -> list[dict[str, str]]:
        if not self.req.include_reasoning or not text:
            return []
        if not self.thinking_over:
            self.held.append(text)
            return []
        return [{"reasoning_content": text, "reasoning": text}]

    def end_of_thinking(self) -> list[dict[str, str]]:
        if self.thinking_over:
            return []
        self.thinking_over = True
        text = "".join(self.held)
        self.held.clear()
        return self.reasoning(text)

    def content(self, text: str) -> list[dict[str, str]]:
        return self.end_of_thinking() + ([{"content": text}] if text else [])


def rollback_marker(event: schema.Event) -> str:
    """What a `backtrack` event adds to the streamed reasoning: deltas cannot be taken back, so
    the reader is told that the text from step `step` on was dropped, and whether for a
    resample (a verdict) or with no contradiction (a forced answer's cut, an early exit)."""
    how = "backtrack" if event.verdict else "cut back"
    return f"\n[{how} to step {event.step}]\n"


async def _chunks(
    gw: Gateway, sub: Subscription, job_id: str, req: ChatRequest, created: int
) -> AsyncIterator[bytes]:
    include_usage = bool((req.stream_options or {}).get("include_usage"))

    def chunk(delta: dict, finish: str | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": job_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": req.model,
            "choices": [choice],
        }

    deltas = StreamDeltas(req)
    sent_content = sent_reasoning = sent_calls = False
    started: set[int] = set()  # calls streamed in fragments
    try:
        yield _sse(chunk({"role": "assistant", "content": ""}))
        async for item in sub.items(gw.config.final_grace_s):
            if isinstance(item, schema.Event):
                out = []
                if item.kind == "token" and item.channel == "content":
                    sent_content = True
                    out = deltas.content(item.text)
                elif item.kind == "token":
                    sent_reasoning = True
                    out = deltas.reasoning(item.text)
                elif item.kind == "backtrack":
                    out = deltas.reasoning(rollback_marker(item))
                elif item.kind == "repair":
                    out = deltas.reasoning(f"\n[repaired: {item.detail}]\n")
                elif item.kind in CALL_EVENTS and item.tool_call is not None:
                    sent_calls = True
                    out = deltas.end_of_thinking() + call_event_deltas(item, started)
                for delta in out:
                    yield _sse(chunk(delta))
                continue
            if item.status in ("rejected", "error"):
                err = item.error or schema.ErrorInfo(code="internal", message="job failed")
                yield _sse({"error": {"code": err.code, "message": err.message}})
                break
            # A cached Result (no tokens were generated for it): its split, whole.
            out = [] if sent_reasoning else deltas.reasoning(reasoning_text(item) or "")
            out += deltas.content("" if sent_content else answer_text(item))
            if not sent_calls:  # a cached Result's calls
                for i, call in enumerate(item.tool_calls):
                    out += tool_call_deltas(i, call)
            for delta in out:
                yield _sse(chunk(delta))
            yield _sse(chunk({}, finish_reason(item)))
            if include_usage:  # the final usage chunk: reasoning tokens too
                yield _sse({**chunk({}), "choices": [], "usage": usage(item)})
            break
        yield b"data: [DONE]\n\n"
    finally:
        gw.hub.unsubscribe(sub)
