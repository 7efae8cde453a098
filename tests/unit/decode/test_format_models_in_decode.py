"""Every format issue 37 added, through the engine and the reasoning driver on a random-weight
model with that family's marker tokens and chat template (tests/model_factory.FORMAT_MODELS):
detection, budget forcing that closes the thinking the format's way, an early exit written in
the format's words, and the split of what came out."""

from __future__ import annotations

import pytest

from pipeline.config import PipelineConfig
from pipeline.engine import Engine, EngineConfig
from pipeline.evals.verified import generate_verified
from pipeline.formats import get_format
from pipeline.reasoning.driver import exit_text
from pipeline.schema import JobParams
from tests.model_factory import FORMAT_MODELS, format_prompt, make_format_model

PREFIX = get_format("qwen3").answer_prefix  # every marker format's: "The answer is \\boxed{"


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    made: dict[str, Engine] = {}

    def engine(name: str) -> Engine:
        if name not in made:
            path = make_format_model(name, root)
            config = EngineConfig(model=str(path), dtype="float32", kv_cache_memory_gb=0.05)
            made[name] = Engine(config)
        return made[name]

    return engine


def rendered(engine: Engine, name: str) -> str:
    return format_prompt(engine.tokenizer.hf, name)


JOB_FIELDS = ("max_thinking_tokens", "max_steps", "early_exit")  # what a Job carries itself


def run(engine: Engine, prompt: str, max_tokens: int = 200, **config):
    own = {k: config.pop(k) for k in JOB_FIELDS if k in config}
    params = [JobParams(temperature=0.0, max_tokens=max_tokens, verify="off", **own)]
    # No class limits to speak of: these random models write a step delimiter every few
    # tokens, and only the job's own caps are under test.
    unbounded = PipelineConfig(default_max_steps=100_000, default_max_thinking_tokens=100_000)
    (out,) = generate_verified(
        engine, [prompt], [()], params, None, pipeline=unbounded, reasoning=config
    )
    return out


def splits_as_streamed(name: str, text: str, prompt: str):
    """The whole split, checked against the text streamed piece by piece."""
    fmt = get_format(name)
    whole = fmt.split(text, prompt)
    splitter, parts = fmt.splitter(prompt), []
    for i in range(0, len(text), 3):  # a few characters at a time, markers cut anywhere
        parts.append(splitter.feed(text[i : i + 3]))
    parts.append(splitter.flush())
    streamed = "".join(p.reasoning for p in parts), "".join(p.content for p in parts)
    assert streamed == (whole.reasoning, whole.content)
    return whole


@pytest.mark.parametrize("name", sorted(FORMAT_MODELS))
def test_a_spent_budget_closes_the_thinking_the_formats_way(engines, name):
    engine = engines(name)
    fmt = engine.reasoning_format
    assert fmt.name == name  # detected from the tokenizer and template (or stepwise.json)
    prompt = rendered(engine, name)
    assert fmt.thinking_at_start(prompt)  # the template opened the thinking
    out = run(engine, prompt, max_thinking_tokens=16)
    assert out.stop_reason == "budget", out.text
    # The forced text: the format's close, then the answer prefix.
    closing = fmt.force_text("x", prompt)
    assert closing.endswith(PREFIX) and closing.removesuffix(PREFIX).strip() in out.text
    parts = splits_as_streamed(name, out.text, prompt)
    split_fmt = get_format(name.replace("_append_think", ""))  # (that one does not split)
    kept = split_fmt.split(out.text, prompt)
    # (A model that closed its thinking at once and reopened it later has content before.)
    assert PREFIX in kept.content and PREFIX not in kept.reasoning, kept
    if name == "minimax_m2_append_think":
        assert parts.reasoning == "" and parts.content.startswith("<think>")


@pytest.mark.parametrize(
    "name", [n for n in sorted(FORMAT_MODELS) if get_format(n).think_end in FORMAT_MODELS[n].tokens]
)
def test_a_model_that_closes_its_thinking_itself_is_not_forced(engines, name):
    engine = engines(name)
    prompt = rendered(engine, name)
    out = run(engine, prompt, max_thinking_tokens=512)
    # The model closed its thinking itself before anything was forced. (A random model opens
    # it again; near the job's max_tokens decode forces an answer into what is left, as it
    # serves any job, so the end may be forced or cut.)
    assert out.stop_reason in ("max_tokens", "budget")
    closed = out.text.find(get_format(name.replace("_append_think", "")).think_end)
    forced = out.text.find(PREFIX)
    assert closed >= 0 and (forced < 0 or closed < forced), out.text
    splits_as_streamed(name, out.text, prompt)


@pytest.mark.parametrize("name", sorted(FORMAT_MODELS))
def test_an_early_exit_writes_the_probed_answer_in_the_formats_words(engines, name):
    engine = engines(name)
    fmt = engine.reasoning_format
    prompt = rendered(engine, name)
    # (Probe tokens count against the job's max_tokens, as decode counts them: these random
    # models' probes answer nothing for a while, so the job gets room to reach one that does.)
    out = run(engine, prompt, max_tokens=800, early_exit=True, probe_every=1, probe_agree=1)
    assert out.probe_tokens > 0  # the format's probe ran after a step
    assert out.stop_reason == "early_exit", out.text
    kept = get_format(name.replace("_append_think", "")).split(out.text, prompt)
    assert PREFIX in kept.content and kept.content.endswith("}.")
    value = kept.content.rsplit(PREFIX, 1)[1].removesuffix("}.")
    assert not fmt.in_thinking(out.text, prompt)
    assert out.text.endswith(exit_text(fmt, "", prompt, value).lstrip())
    splits_as_streamed(name, out.text, prompt)


def test_special_marker_tokens_survive_decoding_and_eos_does_not(engines):
    engine = engines("gpt_oss")  # its Harmony tokens are special, as in gpt-oss's tokenizer
    tok = engine.tokenizer
    ids = tok.encode("<|channel|>final<|message|>7<|return|>", add_special_tokens=False)
    eos = tok.hf.convert_tokens_to_ids("<eos>")
    assert tok.decode([*ids, eos]) == "<|channel|>final<|message|>7<|return|>"
    assert tok.decode([*ids, eos], skip_special_tokens=False).endswith("<eos>")
    assert tok.hf.decode(ids, skip_special_tokens=True) == "final7"  # what it would lose
