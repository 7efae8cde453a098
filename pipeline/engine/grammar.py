"""Structured output's grammars, torch-free (the gateway and ingest check requests with them):
what a request asks for compiled by llguidance, and where in the output it begins to hold.
The masks that enforce it are guided.py's, in the engine."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

import llguidance

from pipeline import schema
from pipeline.errors import InvalidRequestError

GRAMMAR_KINDS = ("json", "json_object", "regex", "choice", "grammar")


class _Guide(Protocol):
    @property
    def active(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class GuidedDecoding:
    """A compiled-on-use grammar and where it starts: after one of `after` appears in the
    output (the thinking's end markers); with `after` empty, from the first token."""

    grammar: str  # llguidance's top-level grammar (JSON text)
    after: tuple[str, ...] = ()


def compile_grammar(kind: str, spec: Any, validate: bool = True) -> str:
    """llguidance's grammar for a structured-output request: `json` (a JSON schema, as an
    object or its text), `json_object` (any JSON object), `regex`, `choice` (a list of
    strings) or `grammar` (Lark, llguidance's dialect). InvalidRequestError says why not.
    `validate=False` skips llguidance's check (a request ingest admitted was checked there):
    the engine's matcher compiles the grammar anyway."""
    try:
        if kind == "json":
            schema = json.loads(spec) if isinstance(spec, str) else spec
            if not isinstance(schema, dict):
                raise InvalidRequestError("a JSON schema must be an object")
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False}
            )
        elif kind == "json_object":
            grammar = llguidance.LLMatcher.grammar_from_json_schema({"type": "object"})
        elif kind == "regex":
            grammar = llguidance.LLMatcher.grammar_from_regex(str(spec))
        elif kind == "choice":
            if not spec or not all(isinstance(c, str) for c in spec):
                raise InvalidRequestError("choice must be a non-empty list of strings")
            grammar = llguidance.LLMatcher.grammar_from_lark(
                "start: " + " | ".join(json.dumps(c) for c in spec)
            )
        elif kind == "grammar":
            grammar = llguidance.LLMatcher.grammar_from_lark(str(spec))
        else:
            raise InvalidRequestError(f"unknown structured output {kind!r}")
    except (ValueError, TypeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"invalid {kind}: {exc}") from None
    error = llguidance.LLMatcher.validate_grammar(grammar) if validate else ""
    if error:
        raise InvalidRequestError(f"invalid {kind}: {error.strip().splitlines()[0]}")
    return grammar


def job_grammar(so: schema.StructuredOutput, validate: bool = True) -> str:
    """The grammar of a Job's structured output (a choice's list travels as JSON text)."""
    spec: Any = so.spec
    if so.kind == "choice":
        try:
            spec = json.loads(so.spec)
        except json.JSONDecodeError:
            raise InvalidRequestError("choice must be a JSON list of strings") from None
    return compile_grammar(so.kind, spec, validate)


def handover(force_text: str, spec: GuidedDecoding, guide: _Guide | None) -> str:
    """Budget forcing's text for a guided sequence: only what closes the thinking (up to its
    end marker), then the grammar writes the answer; nothing once the grammar holds."""
    if guide is not None and guide.active:
        return ""
    ends = [(force_text.find(m), m) for m in spec.after if m in force_text]
    if not ends:
        return "" if not spec.after else force_text
    at, marker = min(ends)
    return force_text[: at + len(marker)]
