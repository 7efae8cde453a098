"""Admission, as plain logic: normalize a Job, tokenize it, stamp its budget and seed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import msgspec

from pipeline import schema
from pipeline.engine.grammar import job_grammar
from pipeline.engine.tokenizer import Tokenizer
from pipeline.errors import InvalidRequestError, PromptTooLongError
from pipeline.toolcalls.forced import forced_schema

# Reads the live budget for an SLO class (the controller's, issue 6); None: defaults.
BudgetSource = Callable[[str], schema.Budget | None]


def template_messages(messages: list[schema.Message]) -> list[dict[str, Any]]:
    """Chat messages as templates read them. An earlier turn's thinking goes under each name
    templates use for it (`reasoning_content`: Qwen3, GLM, Kimi, MiniMax; `reasoning`: vLLM's
    newer name; `thinking`: gpt-oss): the template keeps it or drops it, as its model wants.
    An assistant turn's tool calls carry their arguments as an object (templates write them
    with `tojson`), as vLLM renders them; a tool message its call's id."""
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.reasoning_content is not None:
            for name in ("reasoning_content", "reasoning", "thinking"):
                msg[name] = m.reasoning_content
        if m.tool_calls:
            msg["tool_calls"] = [template_call(c) for c in m.tool_calls]
        if m.tool_call_id is not None:
            msg["tool_call_id"] = m.tool_call_id
        if m.name is not None:
            msg["name"] = m.name
        out.append(msg)
    return out


def template_call(call: schema.ToolCall) -> dict[str, Any]:
    try:
        args: Any = json.loads(call.function.arguments)
    except json.JSONDecodeError:
        args = call.function.arguments
    function = {"name": call.function.name, "arguments": args}
    return {"id": call.id, "type": "function", "function": function}


def template_tools(job: schema.Job) -> list[dict[str, Any]] | None:
    if not job.tools:
        return None
    return [msgspec.to_builtins(t) for t in job.tools]


def tool_plan(job: schema.Job) -> tuple[str, schema.StructuredOutput | None]:
    """How the job's tool calls are read (off | parse | forced) and the grammar its output
    is held to: the job's structured output, or a forced call's list."""
    choice = job.tool_choice
    if not job.tools:
        if choice not in ("auto", "none"):
            raise InvalidRequestError(f"tool_choice {choice!r} needs `tools`", field="tool_choice")
        return "off", job.structured_output
    names = {t.function.name for t in job.tools}
    if len(names) != len(job.tools):
        raise InvalidRequestError("two tools share a name", field="tools")
    if choice == "none":
        return "off", job.structured_output
    if choice == "auto":
        return "parse", job.structured_output
    if choice != "required" and choice not in names:
        raise InvalidRequestError(f"tool_choice names {choice!r}, not one of the tools",
                                  field="tool_choice")  # fmt: skip
    if job.structured_output is not None:
        raise InvalidRequestError(
            "a forced tool call and structured output cannot both hold the output",
            field="tool_choice",
        )
    spec = forced_schema(job.tools, choice, job.parallel_tool_calls)
    return "forced", schema.StructuredOutput(kind="json", spec=json.dumps(spec))


def check_structured_output(so: schema.StructuredOutput | None) -> None:
    """The one check of a structured output (prefill and decode compile it unchecked)."""
    if so is None:
        return
    try:
        job_grammar(so)
    except InvalidRequestError as exc:
        raise InvalidRequestError(str(exc), field="structured_output") from None


def job_seed(job_id: str) -> int:
    """A job without a seed gets one derived from its id: a redelivered job replays exactly."""
    return int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=8).digest(), "little") >> 1


class IngestCore:
    def __init__(
        self,
        tokenizer: Tokenizer,
        max_model_len: int,
        model_name: str,
        default_budget: schema.Budget,
        budget_source: BudgetSource | None = None,
    ):
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.model_name = model_name
        self.default_budget = default_budget
        self.budget_source = budget_source

    def tokenize(self, job: schema.Job) -> list[int]:
        kwargs = job.chat_template_kwargs or {}
        if (tools := template_tools(job)) is not None:
            kwargs = {**kwargs, "tools": tools}
        if job.messages is not None:
            return self.tokenizer.apply_chat_template(template_messages(job.messages), **kwargs)
        if self.tokenizer.has_chat_template:
            msgs = [{"role": "user", "content": job.prompt}]
            return self.tokenizer.apply_chat_template(msgs, **kwargs)
        if kwargs:
            raise InvalidRequestError(
                "chat_template_kwargs needs a model with a chat template; this one has none",
                job_id=job.id,
            )
        return self.tokenizer.encode(job.prompt or "")

    @staticmethod
    def question(job: schema.Job) -> str:
        """The user's question: the prompt, or the last user message (what the verifier reads
        premises from; a rendered chat template would bury them)."""
        if job.messages is None:
            return job.prompt or ""
        users = [m.content for m in job.messages if m.role == "user"]
        return users[-1] if users else ""

    def admit(self, job: schema.Job, now_ms: int) -> schema.PrefillTask:
        """The PrefillTask for a valid job; PromptTooLongError if it cannot fit the context."""
        tool_calls, structured = tool_plan(job)
        check_structured_output(structured)
        token_ids = self.tokenize(job)
        if len(token_ids) >= self.max_model_len:
            raise PromptTooLongError(
                f"prompt is {len(token_ids)} tokens; the model's context is {self.max_model_len}",
                job_id=job.id,
            )
        live = self.budget_source(job.slo.class_) if self.budget_source else None
        budget = live or self.default_budget
        params = job.params
        if params.seed is None:
            params = msgspec.structs.replace(params, seed=job_seed(job.id))
        return schema.PrefillTask(
            id=job.id,
            tenant=job.tenant,
            app=job.app,
            user=job.user,
            model=job.model or self.model_name,
            token_ids=token_ids,
            problem=self.question(job),
            premises=list(job.premises),
            params=params,
            slo=job.slo,
            budget=budget,
            reply_topic=job.reply_topic,
            created_ms=job.created_ms,
            admitted_ms=now_ms,
            tool_calls=tool_calls,  # type: ignore[arg-type]
            structured_output=structured,
        )
