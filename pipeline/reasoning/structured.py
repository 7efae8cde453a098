"""A job's structured output as the engine runs it: the grammar, and the markers after which
it holds (the thinking runs free; a prompt whose template already closed the thinking, or a
format without thinking, is held from the first token)."""

from __future__ import annotations

import dataclasses

from pipeline import schema
from pipeline.engine import SamplingParams
from pipeline.engine.base import StepEngine
from pipeline.engine.grammar import GuidedDecoding, job_grammar
from pipeline.errors import InvalidRequestError
from pipeline.formats import ReasoningFormat
from pipeline.reasoning.types import ReasoningConfig


def grammar_start(fmt: ReasoningFormat, prompt: str) -> tuple[str, ...]:
    """The texts that end the thinking (and so start the grammar); () where it starts at once."""
    markers = fmt.markers
    if markers is None or fmt.start_state(prompt) == "content":
        return ()
    return tuple(markers.ends) + tuple(markers.tool_calls)


def guided_decoding(
    so: schema.StructuredOutput, engine: StepEngine, prompt_ids: list[int]
) -> GuidedDecoding:
    if not engine.supports_guided:
        raise InvalidRequestError(
            f"{type(engine).__name__} enforces no structured output or forced tool calls"
        )
    spec = job_grammar(so, validate=False)  # ingest checked it
    prompt = engine.tokenizer.decode(prompt_ids, skip_special_tokens=False)
    return GuidedDecoding(spec, grammar_start(engine.reasoning_format, prompt))


def held_by_grammar(
    params: SamplingParams, reasoning: ReasoningConfig, guided: GuidedDecoding
) -> ReasoningConfig:
    """A job whose answer `guided`'s grammar writes: its finish held even with verification
    off (a model that ends with its thinking open is given the thinking's end and the grammar
    its answer: reasoning/driver.py), and budget forcing and early exit hand over to it."""
    params.guided = guided
    params.pause_on_finish = True
    return dataclasses.replace(reasoning, answer_by_grammar=True)
