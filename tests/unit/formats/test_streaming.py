"""The streaming invariant: for every text and every cut of it into deltas, the feeds plus the
flush add up to the whole-text split, whatever the format and the prompt."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.formats import Split, format_names, get_format
from pipeline.formats.harmony import TOKENS as HARMONY_TOKENS
from pipeline.formats.split import PartWriter, join_segments
from tests.unit.formats.samples import CASES


def stream(name: str, deltas: list[str], prompt: str = "") -> Split:
    splitter = get_format(name).splitter(prompt)
    total = Split()
    for delta in deltas:
        total = total + splitter.feed(delta)
    return total + splitter.flush()


def cut(text: str, points: list[int]) -> list[str]:
    points = sorted({min(max(p, 0), len(text)) for p in points})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@pytest.mark.parametrize(("name", "prompt", "text"), CASES)
def test_every_single_cut_matches_the_whole_split(name, prompt, text):
    whole = get_format(name).split(text, prompt)
    for i in range(len(text) + 1):
        assert stream(name, [text[:i], text[i:]], prompt) == whole, f"cut at {i}"


@pytest.mark.parametrize(("name", "prompt", "text"), CASES)
def test_character_by_character_matches_the_whole_split(name, prompt, text):
    assert stream(name, list(text), prompt) == get_format(name).split(text, prompt)


@pytest.mark.parametrize(("name", "prompt", "text"), CASES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_multi_cuts_match_the_whole_split(name, prompt, text, data):
    points = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    assert stream(name, cut(text, points), prompt) == get_format(name).split(text, prompt)


def _marker_bits() -> list[str]:
    """Every registered format's markers, whole and cut in two."""
    markers = set(HARMONY_TOKENS)
    for name in format_names():
        m = get_format(name).markers
        markers |= set(m.lexicon.markers) if m is not None else set()
    return sorted(
        markers | {m[: len(m) // 2] for m in markers} | {m[len(m) // 2 :] for m in markers}
    )


# Adversarial texts: marker pieces, answer cues, whitespace and line/paragraph breaks.
MARKER_BITS = ["<", ">", "/", "think", "</", "<th", "ink>", "</thi", *_marker_bits()]
SPACES = ["\n", "\n\n", " ", "\t", "\r\n", "\x0b", "\u00a0"]
ANSWER_BITS = ["a", "7", ".", ":", "Answer", "answer:", "Answer: 5", "The answer is", " 3.5. "]
FRAGMENTS = MARKER_BITS + SPACES + ANSWER_BITS + ["\\boxed{", "}", "**", "####", "Hope."]
PROMPTS = ["", "<think>\n", "<think>\n\n</think>\n\n", "x</think>", "<think>a</think><think>"]
PROMPTS += ["[THINK]", "<|channel>", "<|start|>assistant", "<|start|>assistant<|channel|>analysis"]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=25).map("".join)


@settings(max_examples=1500, deadline=None)
@given(
    name=st.sampled_from(sorted(format_names())),
    prompt=st.sampled_from(PROMPTS),
    text=texts,
    points=st.lists(st.integers(0, 200), max_size=10),
)
def test_adversarial_texts_stream_like_the_whole_split(name, prompt, text, points):
    assert stream(name, cut(text, points), prompt) == get_format(name).split(text, prompt)


@pytest.mark.parametrize("marker", ["<think>", "</think>"])
@pytest.mark.parametrize("name", ["deepseek_r1", "qwen3"])
def test_a_marker_cut_at_every_position_is_still_found(name, marker):
    text = f"before {marker} after"
    at = text.index(marker)
    whole = get_format(name).split(text)
    for i in range(at, at + len(marker) + 1):
        for j in range(i, at + len(marker) + 1):
            assert stream(name, [text[:i], text[i:j], text[j:]]) == whole


def test_a_partial_marker_is_held_back_then_released_as_text():
    splitter = get_format("qwen3").splitter("<think>\n\n</think>\n\n")  # thinking off
    assert splitter.feed("x </th") == Split("", "x")
    assert splitter.feed("ere") == Split("", " </there")


def test_undecided_text_is_held_until_a_marker_decides_it():
    # Qwen3 with no marker in the prompt: a lone </think> would make the text so far reasoning.
    splitter = get_format("qwen3").splitter("<|im_start|>assistant\n")
    assert splitter.feed("12 - 5 = 7, so ") == Split()
    assert splitter.feed("7.</think>\n\nSeven") == Split("12 - 5 = 7, so 7.", "Seven")
    splitter = get_format("qwen3").splitter("<|im_start|>assistant\n")
    assert splitter.feed("Hello! ") == Split()
    assert splitter.feed("<think>hi") == Split("hi", "Hello!")
    splitter = get_format("qwen3").splitter("<|im_start|>assistant\n")
    assert splitter.feed("Just an answer.") == Split()
    assert splitter.flush() == Split("", "Just an answer.")


def test_a_partial_marker_left_at_the_end_is_text():
    splitter = get_format("deepseek_r1").splitter("<think>\n")
    assert splitter.feed("thinking </thi") == Split("thinking", "")
    assert splitter.flush() == Split(" </thi", "")


def test_the_end_marker_cut_in_two_switches_to_content():
    splitter = get_format("deepseek_r1").splitter("<think>\n")
    assert splitter.feed("So 9.\n</th") == Split("So 9.", "")
    assert splitter.feed("ink>\n\nThe answer") == Split("", "The answer")
    assert splitter.feed(" is 9.") == Split("", " is 9.")
    assert splitter.flush() == Split()


@settings(max_examples=200, deadline=None)
@given(
    segments=st.lists(st.lists(st.sampled_from(["a", " ", "\n", "b c", "\t"]), max_size=6)),
)
def test_part_writer_streams_join_segments(segments):
    writer, out = PartWriter(), []
    for pieces in segments:
        out += [writer.write(p) for p in pieces]
        writer.end_segment()
    assert "".join(out) == join_segments("".join(p) for p in segments)
