"""Structured output on the vLLM backend: a job's grammar as vLLM's `structured_outputs`
request field, and where in a sequence it begins to hold.

vLLM holds a whole submission to a grammar, from its first token; the thinking must run free.
So the thinking's submissions carry no grammar, and once its end marker has been handed out
(sampled, or appended by budget forcing) the submission in flight is dropped and the answer
is submitted alone with the grammar. The answer is then one submission (no stop at step ends):
vLLM cannot resume a grammar part-way, so an answer cut inside (a rollback into it) ends the
sequence with an error rather than go on unchecked (docs/vllm.md).
"""

from __future__ import annotations

import json
from typing import Any

from pipeline.engine.grammar import GuidedDecoding
from pipeline.errors import InvalidRequestError


def structured_outputs_field(grammar: str) -> dict[str, Any]:
    """vLLM's `structured_outputs` for one of engine/grammar.py's grammars: a JSON schema (its
    `x-guidance` options travel in it, and vLLM's guidance backend reads them as our llguidance
    does) or a Lark grammar (regex, choice and grammar requests compile to one)."""
    if not grammar.lstrip().startswith("{"):
        return {"grammar": grammar}
    grammars = json.loads(grammar).get("grammars") or []
    if len(grammars) == 1:
        if grammars[0].get("json_schema") is not None:
            return {"json": grammars[0]["json_schema"]}
        if grammars[0].get("lark_grammar") is not None:
            return {"grammar": grammars[0]["lark_grammar"]}
    raise InvalidRequestError("a composite grammar cannot be passed to vLLM's structured outputs")


class GrammarStart:
    """One sequence's grammar start: the token index from which the grammar holds (None while
    the thinking runs), found as the thinking's end marker appears in the output."""

    def __init__(self, spec: GuidedDecoding, token_texts: list[str], num_prompt_tokens: int):
        self.spec = spec
        self.texts = token_texts
        self.num_prompt_tokens = num_prompt_tokens
        self.keep = max((len(m) for m in spec.after), default=1) - 1
        self.field = structured_outputs_field(spec.grammar)
        self.rescan([])

    @property
    def active(self) -> bool:
        """The grammar holds (what the driver asks of a guide, native or not)."""
        return self.at is not None

    def rescan(self, output_ids: list[int]) -> None:
        """Start over from the output's tokens (after a rollback or appended tokens)."""
        self.at: int | None = None if self.spec.after else self.num_prompt_tokens
        self.tail = ""
        for i, token in enumerate(output_ids):
            if self.feed(token, self.num_prompt_tokens + i + 1):
                return

    def feed(self, token: int, num_tokens: int) -> bool:
        """The next output token (the sequence now has `num_tokens`); True when it completes
        the end marker, so that the grammar holds from here."""
        if self.at is not None:
            return False
        text = self.tail + self.texts[token]
        if any(m in text for m in self.spec.after):
            self.at = num_tokens
            return True
        self.tail = text[-self.keep :] if self.keep else ""
        return False
