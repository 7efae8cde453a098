"""Reasoning formats through the engine and the reasoning driver, on random-weight models whose
tokenizers have think markers: detection, the step delimiter, budget forcing that closes the
thinking, and the answer found by the format."""

from __future__ import annotations

import pytest

from pipeline.engine import Engine, EngineConfig
from pipeline.evals.verified import generate_verified
from pipeline.schema import JobParams
from tests.model_factory import add_char_tokenizer, make_tiny_model

# DeepSeek-R1's template opens the thinking in the generation prompt; Qwen3's does not (and
# writes an empty, closed block when thinking is off).
R1_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}"
)
QWEN3_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and "
    "not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
MARKERS = ("<think>", "</think>")


@pytest.fixture(scope="module")
def r1_model(tmp_path_factory):
    path = make_tiny_model("llama", tmp_path_factory.mktemp("r1"))
    return add_char_tokenizer(path, extra_tokens=MARKERS, chat_template=R1_TEMPLATE)


@pytest.fixture(scope="module")
def qwen3_model(tmp_path_factory):
    path = make_tiny_model("qwen3", tmp_path_factory.mktemp("q3"))
    return add_char_tokenizer(path, extra_tokens=MARKERS, chat_template=QWEN3_TEMPLATE)


def engine_for(path, **kw) -> Engine:
    return Engine(EngineConfig(model=str(path), dtype="float32", kv_cache_memory_gb=0.05, **kw))


def test_the_format_is_detected_and_sets_the_step_delimiter(r1_model, qwen3_model, tmp_path):
    assert engine_for(r1_model).reasoning_format.name == "deepseek_r1"
    assert engine_for(qwen3_model).reasoning_format.name == "qwen3"
    engine = engine_for(r1_model)
    assert engine.step_detector.delimiter == "\n\n"
    override = engine_for(r1_model, reasoning_format="plain", step_delimiter="\n")
    assert override.reasoning_format.name == "plain" and override.step_detector.delimiter == "\n"


def force(engine: Engine, messages, budget: int, seed: int):
    prompt = engine.encode_prompt(messages)
    params = [JobParams(temperature=1.0, max_tokens=budget + 60, seed=seed, verify="off",
                        max_thinking_tokens=budget)]  # fmt: skip
    text = engine.tokenizer.decode(prompt)
    (out,) = generate_verified(engine, [messages], [()], params, None)
    return text, out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_spent_budget_closes_the_template_opened_thinking_then_answers(r1_model, seed):
    engine = engine_for(r1_model)
    fmt = engine.reasoning_format
    prompt, out = force(engine, [{"role": "user", "content": "What is 2+3?"}], 24, seed)
    assert prompt.endswith("<think>\n") and fmt.thinking_at_start(prompt)
    assert out.stop_reason == "budget"
    forced = "</think>\n\nThe answer is \\boxed{"
    head, sep, answer = out.text.partition(forced)
    assert sep, out.text  # the thinking was closed, then the answer prefix written
    assert "</think>" not in head  # (a random model that closes it itself gets no second one)
    assert not fmt.in_thinking(out.text, prompt)
    parts = fmt.split(out.text, prompt)
    assert parts.content.startswith("The answer is \\boxed{") and parts.reasoning == head.strip()


@pytest.mark.parametrize("thinking", [True, False])
def test_forcing_follows_the_prompt_for_qwen3(qwen3_model, thinking):
    engine = engine_for(qwen3_model)
    fmt = engine.reasoning_format
    messages = [{"role": "user", "content": "What is 2+3?"}]
    ids = engine.tokenizer.hf.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=thinking
    )
    prompt = ids if isinstance(ids, str) else ""
    assert fmt.thinking_at_start(prompt) is False  # Qwen3 opens the block itself, if at all
    # The model writes nothing to open it, so the budget never finds it open: no </think>.
    forced = fmt.force_text("Some text", prompt)
    assert "</think>" not in forced and forced.endswith("The answer is \\boxed{")
    assert fmt.force_text("<think>\nhmm", prompt).startswith("\n</think>\n\n")
