"""deepseek_r1 and qwen3: `<think>` … `</think>`, opened by the template or by the model."""

import pytest

from pipeline.formats import Split, get_format
from tests.unit.formats import samples as s

R1, QWEN3 = get_format("deepseek_r1"), get_format("qwen3")


def test_r1_template_opened_thinking():
    assert R1.split(s.R1_TEXT, s.R1_PROMPT) == Split(s.R1_REASONING, s.R1_CONTENT)


def test_r1_without_a_prompt_still_starts_inside_thinking():
    assert R1.split(s.R1_TEXT) == Split(s.R1_REASONING, s.R1_CONTENT)


def test_r1_drops_a_start_marker_the_model_writes_anyway():
    parts = R1.split(s.R1_DOUBLE_OPEN, s.R1_PROMPT)
    assert parts == Split("Hmm, $x^2 = 16$ so $x = \\pm 4$.", "$\\boxed{\\pm 4}$")


def test_r1_with_no_end_marker_is_all_reasoning():
    assert R1.split(s.R1_TRUNCATED, s.R1_PROMPT) == Split(s.R1_TRUNCATED, "")


def test_qwen3_thinking_on():
    parts = QWEN3.split(s.QWEN3_TEXT_ON, s.QWEN3_PROMPT_ON)
    assert parts.reasoning.startswith("Okay, the user is asking about apples.")
    assert parts.reasoning.endswith("So she has 7 left.")
    assert parts.content == "Sarah has **7** apples left.\n\n$\\boxed{7}$"


def test_qwen3_thinking_off_is_all_content():
    # enable_thinking=False: the template already wrote `<think>\n\n</think>\n\n`.
    assert QWEN3.split(s.QWEN3_TEXT_OFF, s.QWEN3_PROMPT_OFF) == Split("", s.QWEN3_TEXT_OFF)
    assert not QWEN3.in_thinking("", s.QWEN3_PROMPT_OFF)


def test_qwen3_text_before_any_marker_is_content():
    assert QWEN3.split("Hi there.") == Split("", "Hi there.")
    assert R1.split("Hi there.") == Split("Hi there.", "")  # the R1 template would have opened


def test_qwen3_follows_a_prompt_that_opens_thinking():
    # Qwen3 2507 Thinking / Qwen3.5 templates open the block in the prompt.
    parts = QWEN3.split("12 - 5 = 7.\n</think>\n\n7", s.QWEN3_PROMPT_ON + "<think>\n")
    assert parts == Split("12 - 5 = 7.", "7")


def test_the_prompts_last_marker_decides_where_generation_starts():
    few_shot = "<think>old</think>answer\n<think>new</think>\n"
    assert QWEN3.split("reply", few_shot) == Split("", "reply")
    assert R1.split("reply", few_shot) == Split("", "reply")
    assert QWEN3.split("thought", few_shot + "<think>") == Split("thought", "")


def test_several_thinking_blocks_join_with_a_blank_line():
    text = "<think>a</think>b<think>c</think>d"
    assert QWEN3.split(text) == Split("a\n\nc", "b\n\nd")


def test_a_second_end_marker_is_text_as_vllm_keeps_it():
    assert R1.split("t</think>x </think> y") == Split("t", "x </think> y")


def test_a_second_start_marker_inside_a_block_is_text():
    # The first one the model writes re-opens what the template opened: dropped.
    assert R1.split("<think>Outer<think>Inner</think>Content") == Split(
        "Outer<think>Inner", "Content"
    )


def test_a_tool_call_ends_the_thinking_and_goes_to_the_content():
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    parts = QWEN3.split(f"<think>I should add 2 and 3.\n\n{call}\n</think>\n\nDone.")
    assert parts == Split("I should add 2 and 3.", f"{call}\n\nDone.")
    assert not QWEN3.in_thinking(f"<think>I should add.{call}")


@pytest.mark.parametrize(
    ("fmt", "text", "prompt", "inside"),
    [
        (R1, "", s.R1_PROMPT, True),
        (R1, "so far", "", True),
        (R1, "done.\n</think>\n\nThe", s.R1_PROMPT, False),
        (R1, "done.</thi", s.R1_PROMPT, True),  # not closed yet
        (QWEN3, "", s.QWEN3_PROMPT_ON, False),
        (QWEN3, "<think>\nhmm", s.QWEN3_PROMPT_ON, True),
        (QWEN3, "<think>\nhmm</think>ok", s.QWEN3_PROMPT_ON, False),
        (QWEN3, "", s.QWEN3_PROMPT_OFF, False),
        (QWEN3, "", s.QWEN3_PROMPT_ON + "<think>\n", True),
    ],
)
def test_in_thinking(fmt, text, prompt, inside):
    assert fmt.in_thinking(text, prompt) is inside


def test_force_text_closes_open_thinking():
    assert R1.force_text("So it is 9.", s.R1_PROMPT) == "\n</think>\n\nThe answer is \\boxed{"
    assert R1.force_text("So it is 9.\n", s.R1_PROMPT) == "</think>\n\nThe answer is \\boxed{"
    assert R1.force_text("", s.R1_PROMPT) == "</think>\n\nThe answer is \\boxed{"
    forced = "<think>\nhmm" + QWEN3.force_text("<think>\nhmm", s.QWEN3_PROMPT_ON)
    assert QWEN3.split(forced + "7}", s.QWEN3_PROMPT_ON) == Split("hmm", "The answer is \\boxed{7}")


def test_force_text_does_not_close_closed_thinking():
    text = "So 9.\n</think>\n\n"
    assert R1.force_text(text, s.R1_PROMPT) == "The answer is \\boxed{"
    assert R1.force_text("So 9.\n</think>\n\nIt is", s.R1_PROMPT) == "\n\nThe answer is \\boxed{"
    assert QWEN3.force_text("", s.QWEN3_PROMPT_OFF) == "The answer is \\boxed{"


def test_a_forced_answer_is_found():
    text = "Hmm, 9?" + R1.force_text("Hmm, 9?", s.R1_PROMPT) + "9}"
    assert R1.find_answer(text) == "9"


def test_find_answer_prefers_the_content_then_the_thinking():
    assert R1.find_answer(s.R1_TEXT) == "9"
    assert R1.find_answer("maybe \\boxed{3}\n</think>\n\nThe answer is 4.") == "4"
    assert R1.find_answer("so \\boxed{3}, or \\boxed{5}") == "5"  # thinking only: its last
    assert R1.find_answer("I wonder") is None
    assert QWEN3.find_answer(s.QWEN3_TEXT_ON) == "7"


def test_probe_answer_reads_up_to_the_closing_brace():
    assert R1.probe_answer("9}$.\n\nWait") == "9"
    assert R1.probe_answer("\\frac{3}{4}}") == "\\frac{3}{4}"
    assert R1.probe_answer("9") is None  # cut off before the brace closed: not usable
    assert R1.probe_answer("}") is None
    assert R1.probe_text.endswith("\\boxed{")


def test_is_answer_step():
    assert not R1.is_answer_step("So the answer is probably 9.", after_thinking=False)
    assert R1.is_answer_step("Yes, 9.\n</think>", after_thinking=False)
    assert R1.is_answer_step("To find 3/4 of 12:", after_thinking=True)


def test_strip_markers():
    assert QWEN3.strip_markers("<think>\na\n</think>\n\nb") == "\na\n\n\nb"
    assert R1.strip_markers("no markers") == "no markers"


def test_attributes():
    assert (R1.think_start, R1.think_end, R1.step_delimiter) == ("<think>", "</think>", "\n\n")
    assert R1.answer_prefix == QWEN3.answer_prefix == "The answer is \\boxed{"
    assert R1.answer_max_tokens == 24
    assert R1.name == "deepseek_r1" and QWEN3.name == "qwen3"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>\n6 times 7 is 42.\n</think>\n\nThe answer is \\boxed{42}.", True),
        # thinking never closed: not in the format, whatever it says
        ("<think>\nSo the answer is \\boxed{42}.", False),
        # boxed only inside the thinking, nothing after it
        ("<think>\nIt is \\boxed{42}.\n</think>\n\n", False),
        # stated but not boxed: a boxed format asks for the box
        ("<think>\nok\n</think>\n\nThe answer is 42.", False),
        # an unclosed box is no answer
        ("<think>\nok\n</think>\n\nThe answer is \\boxed{42", False),
        ("<think>\n$\\frac{1}{2}$\n</think>\n\n**Answer:** $\\boxed{\\frac{1}{2}}$", True),
    ],
)
def test_well_formed_needs_closed_thinking_and_a_box_after_it(text, expected):
    assert get_format("qwen3").well_formed(text) is expected
    assert get_format("deepseek_r1").well_formed(text) is expected


def test_well_formed_for_unboxed_formats():
    assert get_format("plain").well_formed("6 * 7 = 42.\n\nThe answer is 42.")
    assert not get_format("plain").well_formed("6 * 7 = 42, I think.")
    assert get_format("tiny").well_formed("6*7=42\nAnswer: 42")
