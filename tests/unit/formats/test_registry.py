"""Names to formats; adding a format is one small class."""

import subprocess
import sys

import pytest

from pipeline.formats import (
    ReasoningFormat,
    Split,
    ThinkTagFormat,
    format_names,
    get_format,
    register_format,
    registry,
)


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made in a test do not outlive it."""
    monkeypatch.setattr(registry, "_FORMATS", dict(registry._FORMATS))


VLLM_NAMES = {  # vLLM's --reasoning-parser names (vllm/reasoning/__init__.py, 0.32.0)
    "deepseek_r1", "deepseek_v3", "ernie45", "gemma4", "glm45", "glm47", "openai_gptoss",
    "granite", "hunyuan_a13b", "kimi_k2", "minimax_m2", "minimax_m2_append_think", "mistral",
    "nemotron_v3", "olmo3", "qwen3", "seed_oss", "step3",
}  # fmt: skip
SGLANG_NAMES = {  # SGLang's (python/sglang/srt/parser/reasoning_parser_names.py)
    "deepseek-r1", "deepseek-v3", "glm45", "hunyuan", "gpt-oss", "kimi_k2", "qwen3",
    "qwen3-thinking", "minimax", "minimax-append-think", "step3", "mistral", "nemotron_3",
    "gemma4",
}  # fmt: skip


def test_builtin_names():
    assert format_names() == [
        "deepseek_r1", "deepseek_v3", "ernie45", "gemma4", "glm45", "glm47", "gpt_oss",
        "granite", "hunyuan_a13b", "kimi_k2", "minimax_m2", "minimax_m2_append_think", "mistral",
        "nemotron_v3", "olmo3", "plain", "qwen3", "seed_oss", "step3", "tiny",
    ]  # fmt: skip


@pytest.mark.parametrize("name", sorted(VLLM_NAMES | SGLANG_NAMES))
def test_vllm_and_sglang_names_work(name):
    fmt = get_format(name)
    assert registry._key(name) in (fmt.name, *fmt.aliases)


def test_an_alias_gives_the_format_under_its_own_name():
    assert get_format("openai_gptoss").name == "gpt_oss"
    assert get_format("minimax-append-think").name == "minimax_m2_append_think"
    assert "openai_gptoss" not in format_names()


@pytest.mark.parametrize("name", ["deepseek_r1", "deepseek-r1", " DeepSeek_R1 "])
def test_names_are_forgiving(name):
    assert get_format(name).name == "deepseek_r1"


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown reasoning format 'cohere_command4'") as err:
        get_format("cohere_command4")
    for name in format_names():
        assert name in str(err.value)


def test_each_call_gives_a_fresh_instance():
    assert get_format("qwen3") is not get_format("qwen3")


def test_adding_a_format_is_one_small_class(scratch_registry):
    @register_format("seed_think")
    class SeedThink(ThinkTagFormat):
        think_start, think_end = "<seed:think>", "</seed:think>"

        def find_answer(self, text: str, prompt: str = "") -> str | None:
            answer = super().find_answer(text, prompt)
            return answer and answer.upper()

    fmt = get_format("seed_think")
    assert isinstance(fmt, SeedThink) and "seed_think" in format_names()
    text = "<seed:think>hmm</seed:think>The answer is \\boxed{x}"
    assert fmt.split(text) == Split("hmm", "The answer is \\boxed{x}")
    assert fmt.find_answer(text) == "X"
    splitter = fmt.splitter()
    streamed = sum((splitter.feed(c) for c in text), Split()) + splitter.flush()
    assert streamed == fmt.split(text)


def test_a_taken_name_is_refused_unless_replaced(scratch_registry):
    with pytest.raises(ValueError, match="already registered"):

        @register_format("plain")
        class Other(ReasoningFormat):
            pass

    @register_format("plain", replace=True)
    class Replacement(ReasoningFormat):
        pass

    assert isinstance(get_format("plain"), Replacement)
    with pytest.raises(ValueError, match="already registered"):

        @register_format("mine", aliases=("openai_gptoss",))
        class Alias(ReasoningFormat):
            pass


def test_register_needs_a_format_class():
    with pytest.raises(TypeError):
        register_format("nope")(dict)


def test_half_defined_markers_fail_at_class_creation():
    with pytest.raises(TypeError, match="think_start and think_end"):

        class Broken(ReasoningFormat):
            think_start = "<think>"

    with pytest.raises(ValueError, match="named twice"):

        class Same(ReasoningFormat):
            think_start = think_end = "|"


def test_base_format_without_markers_is_all_content():
    fmt = ReasoningFormat()
    assert fmt.split("  anything <think> at all ") == Split("", "anything <think> at all")
    assert not fmt.in_thinking("x")


def test_importing_formats_does_not_import_torch():
    code = "import sys, pipeline.formats; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
