"""OpenAI-compatible `/v1/models` and `/v1/chat/completions` (stream and non-stream).

The thinking goes to `reasoning_content` and `reasoning` (vLLM renamed the field; clients read
either), what follows it to `content`: the model's reasoning format splits the generation
(docs/reasoning-formats.md), in decode, where the rendered prompt is known (a template that
opens the thinking itself). Non-stream: the Result's split. Stream: the job streams tokens,
each delta tagged with its part by the format's streaming splitter (a marker cut across tokens
is held until it is whole); a backtrack is shown as a marker line, since deltas cannot retract.

Thinking budgets: vLLM's `thinking_token_budget` caps the job's thinking; `reasoning_effort`
(low / medium / high) picks a cap from EFFORT_BUDGETS. The stamped budget still applies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from fastapi import APIRouter, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict

from pipeline import schema
from pipeline.gateway.deps import GatewayDep, TenantDep
from pipeline.gateway.hub import Subscription
from pipeline.gateway.jobs_api import json_response
from pipeline.gateway.service import Gateway, GatewayError, new_job_id, result_error

router = APIRouter()
FINISH_REASONS = {"answer": "stop", "early_exit": "stop", "unverified": "stop"}
EFFORT_BUDGETS = {"low": 256, "medium": 1024, "high": 4096}  # thinking tokens
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The subset of OpenAI's request that maps onto a Job; other fields are ignored."""

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
    reasoning_effort: str | None = None  # low | medium | high
    verify: str | None = None  # Stepwise's extension (extra_body): off | async | strict


def bad_request(message: str, field: str | None = None) -> GatewayError:
    return GatewayError(message, code="invalid_request_error", status=400, field=field)


def _text(content: str | list[dict[str, Any]] | None) -> str:
    if isinstance(content, list):  # content parts: only text is understood
        return "".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content or ""


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
    messages = []
    for i, m in enumerate(req.messages):
        if m.role not in ROLES:
            raise bad_request(f"role {m.role!r} is not supported", f"messages[{i}].role")
        messages.append({"role": ROLES[m.role], "content": _text(m.content)})
    if req.reasoning_effort is not None and req.reasoning_effort not in EFFORT_BUDGETS:
        raise bad_request(
            f"reasoning_effort must be one of {', '.join(EFFORT_BUDGETS)}", "reasoning_effort"
        )
    thinking = req.thinking_token_budget
    if req.reasoning_effort is not None:
        effort = EFFORT_BUDGETS[req.reasoning_effort]
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


def usage(result: schema.Result) -> dict[str, int]:
    u = result.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def check_result(result: schema.Result) -> None:
    if result.status in ("rejected", "error"):
        raise result_error(result)


def finish_reason(result: schema.Result) -> str:
    return FINISH_REASONS.get(result.budget.stop_reason, "length")


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
        include_usage = bool((req.stream_options or {}).get("include_usage"))
        chunks = _chunks(gw, sub, job.id, req.model, created, include_usage)
        return StreamingResponse(chunks, media_type="text/event-stream")
    try:
        result = await _wait(gw, sub)
    finally:
        gw.hub.unsubscribe(sub)
    check_result(result)
    reasoning = reasoning_text(result)
    message = {
        "role": "assistant",
        "content": answer_text(result),
        "reasoning_content": reasoning,
        "reasoning": reasoning,
    }
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


async def _chunks(
    gw: Gateway, sub: Subscription, job_id: str, model: str, created: int, include_usage: bool
) -> AsyncIterator[bytes]:
    def chunk(delta: dict, finish: str | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": job_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
        }

    def think(text: str) -> bytes:
        return _sse(chunk({"reasoning_content": text, "reasoning": text}))

    sent_content = sent_reasoning = False
    try:
        yield _sse(chunk({"role": "assistant", "content": ""}))
        async for item in sub.items(gw.config.final_grace_s):
            if isinstance(item, schema.Event):
                if item.kind == "token" and item.channel == "content":
                    sent_content = True
                    yield _sse(chunk({"content": item.text}))
                elif item.kind == "token":
                    sent_reasoning = True
                    yield think(item.text)
                elif item.kind == "backtrack":
                    yield think(f"\n[backtrack to step {item.step}]\n")
                continue
            if item.status in ("rejected", "error"):
                err = item.error or schema.ErrorInfo(code="internal", message="job failed")
                yield _sse({"error": {"code": err.code, "message": err.message}})
                break
            # A cached Result (no tokens were generated for it): its split, whole.
            if not sent_reasoning and (reasoning := reasoning_text(item)):
                yield think(reasoning)
            if not sent_content and (content := answer_text(item)):
                yield _sse(chunk({"content": content}))
            yield _sse(chunk({}, finish_reason(item)))
            if include_usage:
                yield _sse({**chunk({}), "choices": [], "usage": usage(item)})
            break
        yield b"data: [DONE]\n\n"
    finally:
        gw.hub.unsubscribe(sub)
