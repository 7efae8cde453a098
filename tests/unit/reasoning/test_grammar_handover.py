"""A model that ends with its thinking open, under a grammar that holds only what follows the
thinking (a structured output, a forced tool call): its end is cut off, the thinking closed
for it, and the grammar writes the answer, with verification off or on. Without the handover
the job would end with no answer at all (found on the R1-style reasoner with
`tool_choice: "required"`)."""

from __future__ import annotations

import json
from concurrent.futures import Future

import jsonschema
import pytest
from safetensors.torch import load_file, save_file

from pipeline.engine import Engine, EngineConfig
from pipeline.engine.grammar import GuidedDecoding, compile_grammar
from pipeline.evals.verified import generate_verified
from pipeline.formats import get_format
from pipeline.reasoning.structured import grammar_start
from pipeline.schema import JobParams
from tests.model_factory import PARAGRAPH, make_format_model

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
END = "</think>"


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    """glm45's markup, a model that never closes its thinking and soon ends: <eos> gets twice
    the blank line's boosted row (it wins wherever that would), the end marker's and the
    tool-call opener's rows are zeroed."""
    path = make_format_model("glm45", tmp_path_factory.mktemp("unclosed"))
    for name in ("config.json", "generation_config.json"):
        if (path / name).is_file():
            config = json.loads((path / name).read_text())
            (path / name).write_text(json.dumps({**config, "eos_token_id": 0}))
    engine = Engine(EngineConfig(model=str(path), dtype="float32", kv_cache_memory_gb=0.05))
    tok = engine.tokenizer.hf
    weights = load_file(path / "model.safetensors")
    head = weights["lm_head.weight"]
    head[0] = 2 * head[tok.convert_tokens_to_ids(PARAGRAPH)]
    for marker in (END, "<tool_call>"):
        head[tok.convert_tokens_to_ids(marker)] = 0.0
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return Engine(EngineConfig(model=str(path), dtype="float32", kv_cache_memory_gb=0.05))


class Entails:
    def submit(self, problem, premises, accepted, step_text):
        fut: Future = Future()
        fut.set_result(("entailed", "", ()))
        return fut


PROMPT = [{"role": "user", "content": "Plan a trip: which city, how many days?"}]


def run(engine: Engine, grammar: str | None, verify: str = "off", seed: int = 1):
    ids = engine.encode_prompt(PROMPT)
    after = grammar_start(get_format("glm45"), engine.tokenizer.decode(ids))
    guided = None if grammar is None else GuidedDecoding(grammar, after)
    params = JobParams(temperature=0.0, max_tokens=300, seed=seed, verify=verify)
    verifier = Entails() if verify != "off" else None
    return generate_verified(engine, [ids], [()], [params], verifier, guided=[guided])[0]


def test_unguided_the_model_ends_inside_its_thinking(engine):
    out = run(engine, None)
    assert out.finish_reason == "stop" and END not in out.text
    assert out.stop_reason == "answer"


@pytest.mark.parametrize("verify", ["off", "async"])
def test_the_grammar_writes_the_answer_after_the_thinking_closed_for_it(engine, verify):
    plain = run(engine, None)
    out = run(engine, compile_grammar("json", SCHEMA), verify)
    thinking, _, answer = out.text.partition(END)
    assert answer, out.text
    jsonschema.validate(json.loads(answer), SCHEMA)
    # The thinking is the model's own, up to where it ended (its end token cut off).
    assert thinking.strip() == plain.text.strip()
    assert out.stop_reason == "answer"  # the model's own end, not a spent budget
    assert out.wasted_tokens == 1  # the end token, and nothing else


def test_a_choice_is_written_too(engine):
    out = run(engine, compile_grammar("choice", ["yes", "no"]))
    assert out.text.partition(END)[2] in ("yes", "no")
