"""Admission, as plain logic: normalize a Job, tokenize it, stamp its budget and seed."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import msgspec

from pipeline import schema
from pipeline.engine.tokenizer import Tokenizer
from pipeline.errors import InvalidRequestError, PromptTooLongError

# Reads the live budget for an SLO class (the controller's, issue 6); None: defaults.
BudgetSource = Callable[[str], schema.Budget | None]


def template_messages(messages: list[schema.Message]) -> list[dict[str, str]]:
    """Chat messages as templates read them. An earlier turn's thinking goes under each name
    templates use for it (`reasoning_content`: Qwen3, GLM, Kimi, MiniMax; `reasoning`: vLLM's
    newer name; `thinking`: gpt-oss): the template keeps it or drops it, as its model wants."""
    out = []
    for m in messages:
        msg = {"role": m.role, "content": m.content}
        if m.reasoning_content is not None:
            for name in ("reasoning_content", "reasoning", "thinking"):
                msg[name] = m.reasoning_content
        out.append(msg)
    return out


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
        )
