"""Typed errors. Each carries a stable `code` that reaches the user in a Result or the DLQ."""

from __future__ import annotations


class StepwiseError(Exception):
    """Base class: `code` is machine-readable, the message is for people."""

    code = "internal"
    job_id: str | None = None  # the job it concerns, when known (for a rejected Result)

    def __init__(self, message: str, *, code: str | None = None, job_id: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        if job_id is not None:
            self.job_id = job_id


class ModelLoadError(StepwiseError):
    """A checkpoint directory is missing files or describes an unsupported model."""

    code = "model_load"


class UnsupportedModelError(ModelLoadError):
    code = "unsupported_model"


class PromptTooLongError(StepwiseError):
    """The prompt does not fit the model's context window."""

    code = "prompt_too_long"


class UnknownRequestError(StepwiseError):
    code = "unknown_request"


class InvalidRequestError(StepwiseError):
    code = "invalid_request"
    field: str | None = None  # the request field at fault, when one is

    def __init__(self, message: str, *, field: str | None = None, **kw: str | None) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.field = field


class KVPoolExhaustedError(StepwiseError):
    """No free KV blocks: the caller should back off (pause intake) and retry later."""

    code = "kv_pool_exhausted"


class ServiceError(StepwiseError):
    """A service binary is missing, or a service did not start or answer in time."""

    code = "service_unavailable"


class OverloadedError(StepwiseError):
    """Refused at admission: the budget controller sheds load, because even the smallest
    budget could not hold the class's SLO (docs/budget.md). Worth sending again after
    `retry_after_s`; the gateway answers it as HTTP 429 with `Retry-After`."""

    code = "overloaded"

    def __init__(self, message: str, *, retry_after_s: float, job_id: str | None = None):
        super().__init__(message, job_id=job_id)
        self.retry_after_s = retry_after_s
