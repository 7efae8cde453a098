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


def test_builtin_names():
    assert format_names() == ["deepseek_r1", "plain", "qwen3", "tiny"]


@pytest.mark.parametrize("name", ["deepseek_r1", "deepseek-r1", " DeepSeek_R1 "])
def test_names_are_forgiving(name):
    assert get_format(name).name == "deepseek_r1"


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown reasoning format 'gpt-oss'") as err:
        get_format("gpt-oss")
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


def test_register_needs_a_format_class():
    with pytest.raises(TypeError):
        register_format("nope")(dict)


def test_half_defined_markers_fail_at_class_creation():
    with pytest.raises(TypeError, match="think_start and think_end"):

        class Broken(ReasoningFormat):
            think_start = "<think>"

    with pytest.raises(ValueError, match="two different strings"):

        class Same(ReasoningFormat):
            think_start = think_end = "|"


def test_base_format_without_markers_is_all_content():
    fmt = ReasoningFormat()
    assert fmt.split("  anything <think> at all ") == Split("", "anything <think> at all")
    assert not fmt.in_thinking("x")


def test_importing_formats_does_not_import_torch():
    code = "import sys, pipeline.formats; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
