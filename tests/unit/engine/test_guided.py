"""Structured output in the engine: the grammar holds what follows the thinking, through
rollback and appended (forced) tokens, and a bad grammar is a clear error."""

from __future__ import annotations

import json

import jsonschema
import pytest

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.engine.grammar import GuidedDecoding, compile_grammar
from pipeline.errors import InvalidRequestError
from tests.model_factory import make_format_model

SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"enum": ["yes", "no", "maybe"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 999},
        "unit": {"type": "string", "maxLength": 6},
    },
    "required": ["answer", "count", "unit"],
    "additionalProperties": False,
}
END = "</think>"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = make_format_model("glm45", tmp_path_factory.mktemp("guided"))
    # The random config's eos_token_id (2) is the character "1" of this tokenizer: the engine
    # would stop on a digit the grammar allowed. A real model's EOS is no text; so here too.
    for name in ("config.json", "generation_config.json"):
        if (path / name).is_file():
            config = json.loads((path / name).read_text())
            (path / name).write_text(json.dumps({**config, "eos_token_id": 0}))
    return Engine(EngineConfig(model=str(path), dtype="float32", kv_cache_memory_gb=0.05))


def params(seed: int, after: tuple[str, ...] = (), **kw) -> SamplingParams:
    guided = GuidedDecoding(compile_grammar("json", SCHEMA), after)
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=200, guided=guided, **kw)


def prompt(engine: Engine) -> list[int]:
    return engine.tokenizer.encode("Q: is it? A:", add_special_tokens=False)


def text_of(engine: Engine, seq) -> str:
    return engine.tokenizer.decode(seq.output_token_ids)


def valid(text: str) -> dict:
    obj = json.loads(text)
    jsonschema.validate(obj, SCHEMA)
    return obj


@pytest.mark.parametrize("seed", range(4))
def test_from_the_first_token_the_output_validates(engine, seed):
    (out,) = engine.generate([prompt(engine)], params(seed))
    assert out.finish_reason == "stop"  # the grammar ended it with EOS, not the length cap
    valid(out.text)


def test_the_models_own_end_marker_starts_the_grammar(engine):
    # This random model closes its thinking itself (its one-token `</think>` is boosted).
    (out,) = engine.generate([prompt(engine)], params(2, after=(END,)))
    thinking, _, rest = out.text.partition(END)
    assert _ and out.finish_reason == "stop"
    valid(rest)


# A marker the random model never writes: only the forcing below ends its "thinking".
MARK = "\nANSWER:"


def force(engine: Engine, request_id: str) -> None:
    engine.append_tokens(request_id, engine.tokenizer.encode(MARK, add_special_tokens=False))


def test_thinking_is_free_until_forced_text_closes_it(engine):
    seq = engine.add(Request("think", prompt(engine), params(7, after=(MARK,))))
    while seq.num_output_tokens < 40:  # free text: the random model's own tokens
        engine.step()
    thinking = text_of(engine, seq)
    assert "{" not in thinking[:1] and not thinking.startswith('{"answer"')
    force(engine, "think")
    while engine.has_unfinished():
        engine.step()
    text = text_of(engine, seq)
    assert text.startswith(thinking + MARK)
    valid(text[len(thinking) + len(MARK) :])


def test_rollback_inside_the_grammar_and_into_the_thinking(engine):
    req = Request("rb", prompt(engine), params(11, after=(MARK,), pause_on_finish=True))
    seq = engine.add(req)
    while seq.num_output_tokens < 6:
        engine.step()
    force(engine, "rb")
    closed_at = seq.num_tokens
    while seq.pending_finish is None:
        engine.step()
    # Back into the middle of the JSON: the matcher rolls back with it; a new seed resamples.
    engine.rollback("rb", closed_at + 4, seed=99)
    engine.resume("rb")
    while seq.pending_finish is None:
        engine.step()
    text = text_of(engine, seq)
    valid(text[text.index(MARK) + len(MARK) :])
    # Back into the thinking: free again until the marker is written once more.
    engine.rollback("rb", closed_at - len(MARK) - 2, seed=5)
    engine.resume("rb")
    force(engine, "rb")
    while seq.pending_finish is None:
        engine.step()
    text = text_of(engine, seq)
    assert text.count(MARK) == 1
    valid(text[text.index(MARK) + len(MARK) :])


@pytest.mark.parametrize(
    "kind, spec, ok",
    [
        ("regex", r"(yes|no) [0-9]{1,3}", lambda t: t.split()[0] in ("yes", "no")),
        ("choice", ["alpha", "beta gamma"], lambda t: t in ("alpha", "beta gamma")),
        ("grammar", 'start: "x=" /[0-9]{2}/', lambda t: t.startswith("x=") and len(t) == 4),
        ("json_object", None, lambda t: isinstance(json.loads(t), dict)),
    ],
)
def test_other_grammars(engine, kind, spec, ok):
    guided = GuidedDecoding(compile_grammar(kind, spec))
    sp = SamplingParams(temperature=1.0, seed=3, max_tokens=120, guided=guided)
    (out,) = engine.generate([prompt(engine)], sp)
    if kind != "json_object":  # an open object may run to the length cap on a random model
        assert out.finish_reason == "stop"
        assert ok(out.text), out.text
    elif out.finish_reason == "stop":
        assert ok(out.text)


@pytest.mark.parametrize(
    "kind, spec, says",
    [
        ("json", {"type": "object", "properties": {"a": {"type": "nonsense"}}}, "invalid json"),
        ("json", "[1, 2", "invalid json"),
        ("json", [1, 2], "must be an object"),
        ("regex", "(unclosed", "invalid regex"),
        ("choice", [], "non-empty list"),
        ("grammar", "start: undefined_rule", "invalid grammar"),
        ("xml", "<a/>", "unknown structured output"),
    ],
)
def test_a_bad_grammar_says_why(kind, spec, says):
    with pytest.raises(InvalidRequestError, match=says):
        compile_grammar(kind, spec)
