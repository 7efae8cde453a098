"""The formats issue 37 added, each on a generation written the way its model writes: the split,
the answer, forcing that closes the thinking the format's way, probes, and detection from a
tokenizer's tokens and chat template."""

from __future__ import annotations

import json

import pytest

from pipeline.formats import Split, detect_format, get_format
from tests.unit.formats import samples as s

# (format, prompt, text, reasoning, content, answer)
SPLITS = [
    ("mistral", "", s.MISTRAL_TEXT,
     "Okay, 15% of 80: 10% of 80 is 8 and 5% is 4, so 8 + 4 = 12.",
     "15% of 80 is **12**.\n\n$$0.15 \\times 80 = \\boxed{12}$$", "12"),
    ("seed_oss", "", s.SEED_TEXT,
     "The area of a circle with radius 3 is $\\pi r^2 = 9\\pi$.\n\nThat is about 28.27.",
     "The area is $9\\pi \\approx 28.27$, so $\\boxed{9\\pi}$.", "9\\pi"),
    ("granite", "", s.GRANITE_TEXT,
     "The train covers 120 km in 2 hours.\n\nSpeed = 120 / 2 = 60 km/h.",
     "The average speed is **60 km/h**.", "60 km/h"),
    ("glm45", s.GLM_PROMPT, s.GLM_TEXT, "7 times 8 is 56. Check: 8 * 7 = 56.",
     "$7 \\times 8 = \\boxed{56}$", "56"),
    ("kimi_k2", "", s.KIMI_TEXT, "Let me look up the weather in Paris before answering.",
     s.KIMI_CALL, None),
    ("hunyuan_a13b", "", s.HUNYUAN_TEXT,
     "A hexagon's interior angles sum to $(6-2) \\times 180 = 720$ degrees.",
     "They add up to $\\boxed{720}$ degrees.", "720"),
    ("ernie45", "", s.ERNIE_TEXT, "The user asks for 2^10. 2^10 = 1024.",
     "$2^{10} = \\boxed{1024}$", "1024"),
    ("minimax_m2", "", s.MINIMAX_TEXT,
     "I need the derivative of $x^3$; by the power rule it is $3x^2$.",
     "The derivative is $\\boxed{3x^2}$.", "3x^2"),
    ("minimax_m2_append_think", "", s.MINIMAX_TEXT, "", "<think>" + s.MINIMAX_TEXT, "3x^2"),
    ("deepseek_v3", s.V3_THINKING, s.R1_TEXT, s.R1_REASONING, s.R1_CONTENT, "9"),
    ("deepseek_v3", s.V3_NOT_THINKING, s.QWEN3_TEXT_OFF, "", s.QWEN3_TEXT_OFF, "7"),
    ("gemma4", "", s.GEMMA_TEXT, "The user wants 25% of 60: 60 / 4 = 15.",
     "25% of 60 is **15**.", "15"),
    ("nemotron_v3", s.NEMOTRON_PROMPT, s.NEMOTRON_TEXT, "9 squared is 9 * 9 = 81.",
     "$9^2 = \\boxed{81}$", "81"),
    ("olmo3", "", s.OLMO_TEXT, "Let me count: 3 + 4 + 5 = 12.", "The total is **12**.", "12"),
    ("step3", "", s.STEP3_TEXT, "The perimeter is 2 * (3 + 5) = 16.",
     "The perimeter is $\\boxed{16}$.", "16"),
    ("gpt_oss", s.HARMONY_PROMPT, s.HARMONY_TEXT, "We need to add 17 and 25.\n\n17 + 25 = 42.",
     "17 + 25 = **42**.\n\n$\\boxed{42}$", "42"),
    ("gpt_oss", s.HARMONY_PROMPT, s.HARMONY_TOOL, "I need the weather first.",
     "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
     '<|message|>{"city":"Paris"}<|call|>', None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "prompt", "text", "reasoning", "content", "answer"), SPLITS)
def test_split_and_answer(name, prompt, text, reasoning, content, answer):
    fmt = get_format(name)
    assert fmt.split(text, prompt) == Split(reasoning, content)
    assert fmt.find_answer(text, prompt) == answer


# A generation cut off inside its thinking, per format: (format, prompt, text so far).
THINKING_SO_FAR = [
    ("mistral", "", "[THINK]Okay, 15% of 80 is"),
    ("seed_oss", "", "<seed:think>The radius is 3, so"),
    ("granite", "", "Here is my thought process:\nSpeed is distance over"),
    ("glm45", s.GLM_PROMPT, "<think>7 times 8 is"),
    ("kimi_k2", "", "<think>The weather in Paris"),
    ("hunyuan_a13b", "", "<think>\nA hexagon has 6 sides, so"),
    ("ernie45", "", "2^10 is 2 * 2 * 2"),
    ("minimax_m2", "", "By the power rule the derivative is"),
    ("minimax_m2_append_think", "", "By the power rule the derivative is"),
    ("deepseek_v3", s.V3_THINKING, "6 times 7 is"),
    ("gemma4", "", "<|channel>thought\n25% is a quarter, so"),
    ("nemotron_v3", s.NEMOTRON_PROMPT, "9 * 9 is"),
    ("olmo3", "", "<think>3 + 4 is 7, plus 5 is"),
    ("step3", "", "2 * (3 + 5) is"),
    ("gpt_oss", s.HARMONY_PROMPT, "<|channel|>analysis<|message|>17 + 25 is"),
]


@pytest.mark.parametrize(("name", "prompt", "text"), THINKING_SO_FAR)
def test_forcing_closes_the_thinking_the_formats_way(name, prompt, text):
    fmt = get_format(name)
    assert fmt.in_thinking(text, prompt) and not fmt.is_answer_step(text, after_thinking=False)
    forced = text + fmt.force_text(text, prompt)
    assert not fmt.in_thinking(forced, prompt)
    assert fmt.is_answer_step(fmt.force_text(text, prompt), after_thinking=False)
    done = forced + "42}."
    parts = get_format(name.replace("_append_think", "")).split(done, prompt)
    assert parts.content.startswith("The answer is \\boxed{42}"), parts
    assert parts.reasoning and parts.reasoning in done
    assert fmt.find_answer(done, prompt) == "42"
    assert fmt.well_formed(done, prompt)
    # Once answering, forcing only writes the answer prefix again.
    assert fmt.force_text(done, prompt).strip().startswith("The answer is")


@pytest.mark.parametrize(("name", "prompt", "text"), THINKING_SO_FAR)
def test_the_probe_reads_the_answer_up_to_the_brace(name, prompt, text):
    fmt = get_format(name)
    assert fmt.probe_text.endswith("\\boxed{")
    assert fmt.probe_answer("42}. So the total") == "42"
    assert fmt.probe_answer("4") is None  # cut off before the brace closed
    assert fmt.step_delimiter == "\n\n"
    assert fmt.in_thinking(text + fmt.probe_text, prompt)  # the probe stays in the thinking


def test_step_texts_lose_the_markers():
    assert get_format("mistral").strip_markers("[THINK]a[/THINK]b") == "ab"
    assert get_format("gpt_oss").strip_markers(s.HARMONY_TEXT) == (
        "We need to add 17 and 25.\n\n17 + 25 = 42.17 + 25 = **42**.\n\n$\\boxed{42}$"
    )
    assert get_format("ernie45").strip_markers("x</think>\n\n<response>y</response>") == "x\n\ny"


def test_harmony_thinking_ends_with_a_complete_final_header():
    fmt = get_format("gpt_oss")
    assert fmt.in_thinking("", s.HARMONY_PROMPT)
    assert fmt.in_thinking("<|channel|>analysis<|message|>a<|end|>", s.HARMONY_PROMPT)
    assert fmt.in_thinking("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>fin")
    assert not fmt.in_thinking(s.HARMONY_TEXT, s.HARMONY_PROMPT)
    assert not fmt.in_thinking(s.HARMONY_TOOL, s.HARMONY_PROMPT)  # a tool call ends it too
    # The forcing text at the very start writes the channel the template's header lacks.
    forced = get_format("gpt_oss").force_text("", s.HARMONY_PROMPT)
    assert forced == "<|channel|>final<|message|>The answer is \\boxed{"


def test_hunyuan_ends_the_thinking_only_at_the_answer_tag():
    fmt = get_format("hunyuan_a13b")
    assert fmt.in_thinking("<think>\nSo 720.\n</think>\nHmm, wait")  # vLLM's fallback
    assert not fmt.in_thinking("<think>\nSo 720.\n</think>\n<answer>\n")


def test_deepseek_v3_thinking_follows_the_template_kwarg():
    fmt = get_format("deepseek_v3")
    assert fmt.thinking_at_start(s.V3_THINKING) and not fmt.thinking_at_start(s.V3_NOT_THINKING)
    assert not fmt.thinking_at_start("")  # thinking is off by default
    assert fmt.force_text("6 * 7 is", s.V3_THINKING).startswith("\n</think>")


def test_append_think_keeps_the_thinking_in_the_content_but_answers_from_after_it():
    fmt = get_format("minimax_m2_append_think")
    text = "Maybe $\\boxed{5}$? No: 2 + 2 = 4.</think>\n\nSo $\\boxed{4}$."
    assert fmt.split(text).content.startswith("<think>Maybe")
    assert fmt.find_answer(text) == "4"


# --- detection from tokenizer files --------------------------------------------------------------


def _added(*tokens: str, special: bool = True) -> dict:
    return {
        "added_tokens": [{"id": i, "content": t, "special": special} for i, t in enumerate(tokens)]
    }


DETECTED = [
    ("gpt_oss", _added("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>"), ""),
    ("mistral", _added("[THINK]", "[/THINK]", "[INST]"), ""),
    ("seed_oss", _added("<seed:think>", "</seed:think>", "<seed:bos>"), ""),
    ("gemma4", _added("<|channel>", "<channel|>", "<|turn>"), ""),
    ("granite", {}, "Respond... Here is my thought process: ... Here is my response: ..."),
    ("glm45", _added("[gMASK]", "<sop>", "<think>", "</think>"), ""),
    ("kimi_k2", _added("<think>", "</think>", "<|tool_calls_section_begin|>"), ""),
    ("hunyuan_a13b", _added("<think>", "</think>", "<answer>", "</answer>"), ""),
    ("ernie45", _added("<think>", "</think>", "<response>", "</response>"), ""),
    ("minimax_m2", _added("<think>", "</think>", "<minimax:tool_call>"), ""),
    ("deepseek_v3", _added("<think>", "</think>"),
     "{% if add_generation_prompt %}{% if thinking %}{{'<｜Assistant｜><think>'}}{% else %}"
     "{{'<｜Assistant｜></think>'}}{% endif %}{% endif %}"),
    ("deepseek_r1", _added("<think>", "</think>"),
     "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"),
    ("qwen3", _added("<think>", "</think>", "<tool_call>"), ""),
]  # fmt: skip


@pytest.mark.parametrize(("name", "tokenizer", "template"), DETECTED)
def test_detected_from_the_tokenizer_and_template(tmp_path, name, tokenizer, template):
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    assert detect_format(tmp_path) == name


@pytest.mark.parametrize(
    ("name", "prompt", "pieces", "count"),
    [
        # The template opened the thinking: "12 - 5", " = 7", "</think>" are thinking.
        ("deepseek_r1", s.R1_PROMPT, ["12 - 5", " = 7", "</think>", "\n\n", "7"], 3),
        # A marker cut across tokens: the token that completes it is still the thinking's
        # (the opener the model writes is not: it is read before the thinking is open).
        ("qwen3", s.QWEN3_PROMPT_ON, ["<think>", "so 7", "</th", "ink>", "Seven."], 3),
        # Undecided: the text before a lone end marker turns out to be thinking...
        ("qwen3", "", ["So ", "7", "</think>", "Seven."], 3),
        # ... and text with no marker at all, content.
        ("qwen3", "", ["Just ", "seven."], 0),
        (
            "gpt_oss",
            s.HARMONY_PROMPT,
            [
                "<|channel|>",
                "analysis",
                "<|message|>",
                "a",
                "<|end|>",
                "<|start|>",
                "assistant",
                "<|channel|>",
                "final",
                "<|message|>",
                "7",
            ],
            10,
        ),  # fmt: skip
        ("mistral", "", ["[THINK]", "so 12", "[/THINK]", "12"], 3),
    ],
)
def test_reasoning_tokens_are_those_read_while_thinking(name, prompt, pieces, count):
    assert get_format(name).count_reasoning_tokens(pieces, prompt) == count


def test_formats_without_markers_leave_the_count_to_the_caller():
    assert get_format("plain").count_reasoning_tokens(["a", "b"]) is None
    assert get_format("tiny").count_reasoning_tokens(["a", "b"]) is None
