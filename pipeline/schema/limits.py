"""The wire contract's version, identifiers, limits and error codes (docs/wire-format.md).

Every decoding failure is a SchemaError whose `code` is one of SCHEMA_ERROR_CODES.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

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
# ungrounded: a number found nowhere in the problem or the earlier steps; never a backtrack.
Verdict = Literal[
    "entailed", "contradicted", "consistent", "no_claim", "unknown", "unverified", "ungrounded"
]
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
    max_template_kwargs: int = 32
    max_premise_chars: int = 2048
    max_dead_letter_payload_bytes: int = 64 << 10
    max_peek_bytes: int = 16 << 20  # oversize input up to this size is still read for its id

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)}")


DEFAULT_LIMITS = Limits()
