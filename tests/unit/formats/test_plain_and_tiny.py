"""The formats without markers: plain (paragraphs) and tiny (lines, `Answer:`)."""

import pytest

from pipeline.formats import Split, get_format
from tests.unit.formats import samples as s

PLAIN, TINY = get_format("plain"), get_format("tiny")


def test_plain_content_is_the_answering_paragraph():
    assert PLAIN.split(s.SMOL_TEXT) == Split(
        "Sarah starts with 12 apples. She gives away 5 of them.\n\n12 - 5 = 7\n\n"
        "So, she has 7 apples left.",
        "The answer is 7.",
    )
    assert PLAIN.find_answer(s.SMOL_TEXT) == "7"


def test_plain_chat_reply_is_all_content():
    assert PLAIN.split(s.SMOL_CHAT) == Split("", s.SMOL_CHAT)


def test_plain_without_an_answer_the_last_paragraph_is_content():
    assert PLAIN.split("First.\n\nSecond.\n\n") == Split("First.", "Second.")


def test_plain_content_runs_from_the_last_answer_to_the_end():
    text = "Work.\n\nThe answer is 3.\n\nHmm.\n\nThe answer is 4.\n\nHope this helps!"
    assert PLAIN.split(text) == Split(
        "Work.\n\nThe answer is 3.\n\nHmm.", "The answer is 4.\n\nHope this helps!"
    )


def test_plain_streams_a_paragraph_once_the_next_one_starts():
    splitter = PLAIN.splitter()
    assert splitter.feed("Sarah starts with 12.\n\n") == Split()  # may still be the last one
    assert splitter.feed("12 - 5") == Split("Sarah starts with 12.", "")
    assert splitter.feed(" = 7\n\nThe answer is 7.") == Split("\n\n12 - 5 = 7", "")
    assert splitter.flush() == Split("", "The answer is 7.")


def test_plain_forcing_and_probing():
    assert PLAIN.force_text("So, she has 7 left.") == "\n\nThe answer is "
    assert PLAIN.force_text("So, she has 7 left.\n") == "\nThe answer is "
    assert PLAIN.force_text("So, she has 7 left.\n\n") == "The answer is "
    assert not PLAIN.in_thinking("So, she has 7 left.")
    assert PLAIN.probe_answer(" 7.\n\nBut wait") == "7"
    assert PLAIN.probe_answer(" $\\boxed{7}$.") == "7"
    assert PLAIN.probe_answer(" ") is None
    assert PLAIN.probe_text == "\n\nThe answer is"


def test_plain_is_answer_step():
    assert PLAIN.is_answer_step("The answer is 7.", after_thinking=False)
    assert not PLAIN.is_answer_step("So, she has **7** apples left.", after_thinking=False)


def test_plain_keeps_markers_as_text():
    assert PLAIN.strip_markers("a <think> b") == "a <think> b"
    assert PLAIN.think_start is None and PLAIN.think_end is None


def test_tiny_content_is_the_answer_line():
    assert TINY.split(s.TINY_TEXT) == Split(
        "3x = 22 - 7 = 15\nx = 15 / 3 = 5\nCheck: 3 * 5 + 7 = 22", "Answer: 5"
    )
    assert TINY.find_answer(s.TINY_TEXT) == "5"


def test_tiny_an_earlier_answer_line_is_reasoning():
    text = "37 * 14 = 518\nAnswer: 518\n2 * 3 = 6\nAnswer: 6"
    assert TINY.split(text) == Split("37 * 14 = 518\nAnswer: 518\n2 * 3 = 6", "Answer: 6")
    assert TINY.find_answer(text) == "6"


def test_tiny_without_an_answer_line_is_all_reasoning():
    assert TINY.split("7 + 8 = 15\n") == Split("7 + 8 = 15", "")
    assert TINY.find_answer("7 + 8 = 15\nanswer") is None


def test_tiny_answers_are_raw_line_values():
    assert TINY.find_answer("Answer: x = 4, y = 7\n") == "x = 4, y = 7"
    assert TINY.find_answer("answer : 7/2") == "7/2"
    assert TINY.find_answer("Answer: 5\nAnswer:") == "5"  # a cue with no value yet


def test_tiny_streams_steps_at_once_and_holds_the_answer_line():
    splitter = TINY.splitter()
    assert splitter.feed("3x = 15\nx = ") == Split("3x = 15\nx =", "")
    assert splitter.feed("5\nAns") == Split(" 5", "")
    assert splitter.feed("wer: 5") == Split()
    assert splitter.flush() == Split("", "Answer: 5")


@pytest.mark.parametrize(
    ("text", "forced"),
    [("x = 5\n", "Answer:"), ("x = 5", "\nAnswer:"), ("", "Answer:")],
)
def test_tiny_force_text(text, forced):
    assert TINY.force_text(text) == forced


def test_tiny_probe_and_answer_steps():
    assert TINY.probe_answer(" 5\n") == "5"
    assert TINY.probe_answer("") is None
    assert TINY.is_answer_step("Answer: 5", after_thinking=False)
    assert not TINY.is_answer_step("3x = 15", after_thinking=False)
    assert TINY.step_delimiter == "\n"
    assert TINY.answer_prefix == TINY.probe_text == "Answer:"


def test_plain_lines_before_the_answer_in_its_paragraph_are_reasoning():
    parts = PLAIN.split(s.SMOL_LINES)
    assert parts.content == "#### 17\nThe answer is 17."
    assert parts.reasoning == "12 apples * 4 bags = 56 apples\nSo she has 12 + 3 = 17 apples now."
