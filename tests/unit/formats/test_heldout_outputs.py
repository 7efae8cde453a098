"""Held-out checks of the reasoning formats against completions written the way real models write.

Every expectation below comes from `docs/reasoning-formats.md` (the spec) and from what an
OpenAI client should see, not from running the code. A case the code gets wrong is kept and
marked `xfail(strict=True)` in `XFAIL` with the reason, so a fix shows up as an XPASS.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from pipeline.formats import Split, find_answer, get_format

THINK, END = "<think>", "</think>"
SKIP = object()  # "the spec does not pin this down": not asserted


@dataclass(frozen=True)
class Case:
    id: str
    fmt: str
    prompt: str
    text: str
    reasoning: object  # str, or SKIP
    content: object  # str, or SKIP
    answer: object  # str, None (no answer), or SKIP


# --- prompts, as the chat templates render them -------------------------------------------------


def r1_prompt(question: str) -> str:
    return (
        "<｜begin▁of▁sentence｜><｜User｜>"
        f"{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
        "<｜Assistant｜><think>\n"
    )


def qwen_prompt(question: str, tail: str = "") -> str:
    """Qwen3 / QwQ (ChatML); `tail` is what the generation prompt adds after `assistant\\n`."""
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{tail}"


QWEN_OFF = "<think>\n\n</think>\n\n"  # Qwen3 with enable_thinking=False
QWEN_OPEN = "<think>\n"  # QwQ / Qwen3-2507-Thinking


def smol_prompt(question: str) -> str:
    return (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        f"Face<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    )


def llama_prompt(question: str) -> str:
    return (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
        f"{question}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


# --- the completions ---------------------------------------------------------------------------

CASES: list[Case] = []


def case(id, fmt, prompt, text, reasoning, content, answer):
    CASES.append(Case(id, fmt, prompt, text, reasoning, content, answer))


# DeepSeek-R1 distills: the template opened the block with "<think>\n".
_r1_apples_think = (
    "Okay, so Tom has 5 apples and then he buys 7 more. I need to figure out how many apples "
    "he has in total.\n\n"
    "Let me add them: 5 + 7 = 12. So he should have 12 apples.\n\n"
    "Wait, let me double-check. 5 + 5 is 10, and 2 more makes 12. Yeah, that's right."
)
_r1_apples_answer = (
    "Tom starts with 5 apples and buys 7 more:\n\n"
    "$$\n5 + 7 = 12\n$$\n\n"
    "**Final Answer**\n"
    "Tom has \\boxed{12} apples."
)
case(
    "r1_apples",
    "deepseek_r1",
    r1_prompt("Tom has 5 apples and buys 7 more. How many apples does he have?"),
    _r1_apples_think + "\n</think>\n\n" + _r1_apples_answer,
    _r1_apples_think,
    _r1_apples_answer,
    "12",
)

_r1_frac_think = (
    "Okay, let's see. The bag has 3 red marbles and 1 blue marble, and we pick one at random. "
    "What's the probability it's red?\n\n"
    "There are 4 marbles in total, and 3 of them are red. So the probability should be 3 out "
    "of 4.\n\n"
    "Hmm, is there any trick here? No, it's a single draw, so it's just favorable over total, "
    "which is 3/4."
)
_r1_frac_answer = (
    "The bag contains \\(3 + 1 = 4\\) marbles, of which 3 are red.\n\n"
    "\\[\nP(\\text{red}) = \\frac{3}{4}\n\\]\n\n"
    "**Final Answer**\n"
    "\\boxed{\\frac{3}{4}}"
)
case(
    "r1_fraction",
    "deepseek_r1",
    r1_prompt("A bag has 3 red marbles and 1 blue marble. What is the probability of red?"),
    _r1_frac_think + "\n</think>\n\n" + _r1_frac_answer,
    _r1_frac_think,
    _r1_frac_answer,
    "\\frac{3}{4}",
)

_r1_twice_think = (
    "Alright, each box has 4 pencils and there are 3 boxes. So 3 times 4 is 12.\n\n"
    "That seems straightforward. 4 + 4 + 4 = 12 as well."
)
_r1_twice_answer = (
    "There are 3 boxes with 4 pencils each, so the total is \\(3 \\times 4 = 12\\), "
    "so the answer is \\boxed{12}.\n\n"
    "**Final Answer**\n"
    "\\boxed{12}"
)
case(
    "r1_boxed_twice",
    "deepseek_r1",
    r1_prompt("There are 3 boxes with 4 pencils each. How many pencils are there?"),
    _r1_twice_think + "\n</think>\n\n" + _r1_twice_answer,
    _r1_twice_think,
    _r1_twice_answer,
    "12",
)

_r1_corr_think = (
    "Okay, Tom had 5 apples, bought 5 more, so that's 10. So the answer would be \\boxed{10}.\n\n"
    "Wait, no. He also found 2 apples on the way home. So it's 10 + 2 = 12."
)
_r1_corr_answer = (
    "Counting only the purchase gives $\\boxed{10}$, but that misses the 2 apples he found.\n\n"
    "The correct total is $5 + 5 + 2 = 12$, so Tom has $\\boxed{12}$ apples."
)
case(
    "r1_boxed_last_wins",
    "deepseek_r1",
    r1_prompt("Tom had 5 apples, bought 5 and found 2. How many does he have?"),
    _r1_corr_think + "\n</think>\n\n" + _r1_corr_answer,
    _r1_corr_think,
    _r1_corr_answer,
    "12",
)

_r1_cf_think = (
    "Hmm, 3 boxes of 4 is 12, but maybe I should box 10? Like \\boxed{10}? No, that's wrong, "
    "it's 12."
)
_r1_cf_answer = "Three boxes of four pencils make twelve pencils. The answer is 12."
case(
    "r1_content_first",  # content's "the answer is" beats a box left in the thinking
    "deepseek_r1",
    r1_prompt("3 boxes of 4 pencils: how many pencils?"),
    _r1_cf_think + "\n</think>\n\n" + _r1_cf_answer,
    _r1_cf_think,
    _r1_cf_answer,
    "12",
)

_r1_x_think = (
    "Alright, I need to solve 2x + 3 = 13 for x.\n\n"
    "First, subtract 3 from both sides: 2x = 10. Then divide both sides by 2: x = 5.\n\n"
    "Let me plug it back in to check: 2(5) + 3 = 10 + 3 = 13. That matches."
)
_r1_x_answer = (
    "To solve \\(2x + 3 = 13\\):\n\n"
    "1. Subtract 3 from both sides: \\(2x = 10\\)\n"
    "2. Divide both sides by 2: \\(x = 5\\)\n\n"
    "$\\boxed{x = 5}$"
)
case(
    "r1_solve_x",
    "deepseek_r1",
    r1_prompt("Solve 2x + 3 = 13."),
    _r1_x_think + "\n</think>\n\n" + _r1_x_answer,
    _r1_x_think,
    _r1_x_answer,
    "x = 5",
)

_r1_trunc = (
    "Okay, so I need to find the sum of the first 100 positive integers.\n\n"
    "I remember there's a formula for this: n(n + 1)/2. With n = 100, that's 100 * 101 / 2, "
    "which is 5050.\n\n"
    "Wait, but let me make sure I'm remembering the formula correctly. If n = 3, the sum "
    "1 + 2 + 3 = 6, and 3 * 4 / 2 = 6. Okay, so the formula works.\n\n"
    "Alternatively, I could pair the numbers: 1 + 100, 2 + 99, and so on"
)
case(
    "r1_truncated_no_answer",  # never closed: all reasoning, content ""
    "deepseek_r1",
    r1_prompt("What is the sum of the first 100 positive integers?"),
    _r1_trunc,
    _r1_trunc,
    "",
    None,
)

_r1_trunc2 = (
    "Okay, the factory makes 300 toys a day, and we want 4 days. 300 times 4 is 1,200.\n\n"
    "So the answer is 1,200.\n\n"
    "But wait, let me check the units again. The question asks for"
)
case(
    "r1_truncated_answer_in_thinking",  # find_answer falls back to the thinking
    "deepseek_r1",
    r1_prompt("A factory makes 300 toys a day. How many in 4 days?"),
    _r1_trunc2 + "\n",
    _r1_trunc2,
    "",
    "1200",
)

_r1_re_think = (
    "Okay, the user wants 15% of 80.\n\n10% of 80 is 8, and 5% is 4, so 15% is 8 + 4 = 12."
)
_r1_re_answer = "15% of 80 is \\(0.15 \\times 80 = 12\\).\n\nThe answer is $\\boxed{12}$."
case(
    "r1_writes_think_again",  # a <think> that changes nothing is dropped
    "deepseek_r1",
    r1_prompt("What is 15% of 80?"),
    "<think>\n" + _r1_re_think + "\n</think>\n\n" + _r1_re_answer,
    _r1_re_think,
    _r1_re_answer,
    "12",
)
case(
    "r1_no_prompt_model_opens",  # no marker in the prompt: deepseek_r1 starts inside anyway
    "deepseek_r1",
    "",
    "<think>\n" + _r1_re_think + "\n</think>\n\n" + _r1_re_answer,
    _r1_re_think,
    _r1_re_answer,
    "12",
)
case(
    "r1_no_prompt_no_open",
    "deepseek_r1",
    "",
    _r1_re_think + "\n</think>\n\n" + _r1_re_answer,
    _r1_re_think,
    _r1_re_answer,
    "12",
)
case(
    "r1_closed_then_stopped",
    "deepseek_r1",
    r1_prompt("What is 6 times 7?"),
    "Okay, 6 times 7. That's 42.\n</think>\n\n",
    "Okay, 6 times 7. That's 42.",
    "",
    None,
)
case(
    "r1_second_close_kept",  # a second </think> is text, as vLLM keeps it (issue 37)
    "deepseek_r1",
    r1_prompt("What is 6 times 7?"),
    "Okay, 6 times 7 is 42.\n</think>\n\nThe final answer is $42$.\n</think>",
    "Okay, 6 times 7 is 42.",
    "The final answer is $42$.\n</think>",
    "42",
)
case(
    "r1_partial_marker_at_end",  # "</thi" that never completes is text, not a marker
    "deepseek_r1",
    r1_prompt("What is 2 + 2?"),
    "Okay, so 2 + 2 = 4.\n</thi",
    "Okay, so 2 + 2 = 4.\n</thi",
    "",
    None,
)
case(
    "r1_multiturn_prompt",  # the prompt's LAST marker decides: an open <think>
    "deepseek_r1",
    "<｜User｜>Hi<｜Assistant｜><think>\nGreeting.\n</think>\n\nHello!<｜end▁of▁sentence｜>"
    "<｜User｜>What is 9 - 13?<｜Assistant｜><think>\n",
    "9 - 13 = -4.\n</think>\n\n$9 - 13 = \\boxed{-4}$",
    "9 - 13 = -4.",
    "$9 - 13 = \\boxed{-4}$",
    "-4",
)

case(
    "r1_think_again_mid_thinking",  # a <think> inside an open block changes nothing
    "deepseek_r1",
    r1_prompt("What is 9 * 8?"),
    "Okay, 9 * 8. Let me think.\n<think>\n9 * 8 = 72.\n</think>\n\nThe answer is 72.",
    SKIP,  # how the stretches around a dropped marker join is not pinned down
    "The answer is 72.",
    "72",
)
case(
    "r1_reopens_after_close",  # the model opens a second block: two stretches a part
    "deepseek_r1",
    r1_prompt("How many pencils in 3 boxes of 4?"),
    "Three boxes, four each.\n</think>\n\nThere are 3 boxes.\n\n"
    "<think>\nHmm, let me reconsider: 3 * 4 = 12.\n</think>\n\nSo the total is \\boxed{12}.",
    "Three boxes, four each.\n\nHmm, let me reconsider: 3 * 4 = 12.",
    "There are 3 boxes.\n\nSo the total is \\boxed{12}.",
    "12",
)
case(
    "r1_angle_brackets",  # "<" that starts no marker must come out as text
    "deepseek_r1",
    r1_prompt("Which integer x has 3 < x < 5?"),
    "Since x > 3 and x < 5, x = 4. Note that <thin and </th are not tags.\n</think>\n\n"
    "We need 3 < x < 5, so $x = \\boxed{4}$. <",
    "Since x > 3 and x < 5, x = 4. Note that <thin and </th are not tags.",
    "We need 3 < x < 5, so $x = \\boxed{4}$. <",
    "4",
)

# QwQ-style long thinking (QwQ's template opens the block, like R1's).
_qwq_think = (
    "Okay, so I need to solve this problem: find the integer x such that 3x + 7 = -5.\n\n"
    "Let me start by subtracting 7 from both sides. That gives 3x = -12. Then dividing by 3, "
    "x = -4.\n\n"
    "Wait, let me check that again. If x = -4, then 3 times -4 is -12, and -12 + 7 is -5. "
    "Yes, that works.\n\n"
    "Alternatively, I could think of it as 3x = -5 - 7, which is -12, so x = -12 / 3 = -4. "
    "Same result.\n\n"
    "Wait, but the problem says integer, and -4 is an integer, so that's fine. Hmm, is there "
    "any other possible solution? No, it's a linear equation, so there's exactly one "
    "solution.\n\n"
    "So the answer should be -4."
)
_qwq_answer = (
    "To solve \\(3x + 7 = -5\\):\n\n"
    "1. Subtract 7 from both sides: \\(3x = -12\\).\n"
    "2. Divide both sides by 3: \\(x = -4\\).\n\n"
    "**Verification:** \\(3(-4) + 7 = -12 + 7 = -5\\). ✓\n\n"
    "\\[\n\\boxed{-4}\n\\]"
)
for _fmt in ("deepseek_r1", "qwen3"):
    case(
        f"qwq_long_{_fmt}",
        _fmt,
        qwen_prompt("Find the integer x with 3x + 7 = -5.", QWEN_OPEN),
        _qwq_think + "\n</think>\n\n" + _qwq_answer,
        _qwq_think,
        _qwq_answer,
        "-4",
    )

# Qwen3: the model writes the markers itself.
_q_on_think = (
    "Okay, the user is asking for 15% of 80. Let me think.\n\n"
    "10% of 80 is 8, and 5% of 80 is half of that, which is 4. So 15% is 8 + 4 = 12."
)
_q_on_answer = "15% of 80 is **12**.\n\nHere's how:\n- 10% of 80 = 8\n- 5% of 80 = 4\n- 8 + 4 = 12"
case(
    "qwen3_thinking_on",
    "qwen3",
    qwen_prompt("What is 15% of 80?"),
    "<think>\n" + _q_on_think + "\n</think>\n\n" + _q_on_answer,
    _q_on_think,
    _q_on_answer,
    "12",
)
_q_off = (
    "To find 25% of 60, multiply 0.25 by 60:\n\n$$0.25 \\times 60 = 15$$\n\n"
    "The answer is $\\boxed{15}$."
)
case(
    "qwen3_thinking_off",
    "qwen3",
    qwen_prompt("What is 25% of 60?", QWEN_OFF),
    _q_off,
    "",
    _q_off,
    "15",
)
_q_empty = (
    "The temperature starts at 4°C and drops by 11°C, so it ends at 4 - 11 = -7°C.\n\n"
    "The answer is -7."
)
case(
    "qwen3_empty_block_written",  # /no_think: the model writes the empty block itself
    "qwen3",
    qwen_prompt("It is 4°C and the temperature drops 11°C. What is it now? /no_think"),
    "<think>\n\n</think>\n\n" + _q_empty,
    "",
    _q_empty,
    "-7",
)
_q_2507_think = (
    "Okay, let's tackle this. 7 pizzas shared between 2 friends. 7 divided by 2 is 3.5.\n\n"
    "Let me verify: 3.5 + 3.5 = 7. Yes."
)
_q_2507_answer = "Each friend gets 7 / 2 pizzas. The answer is 3.5. That's three and a half each."
case(
    "qwen3_2507_open_in_prompt",
    "qwen3",
    qwen_prompt("7 pizzas are shared equally by 2 friends. How many does each get?", QWEN_OPEN),
    _q_2507_think + "\n</think>\n\n" + _q_2507_answer,
    _q_2507_think,
    _q_2507_answer,
    "3.5",
)
_q_trunc = "Okay, so I need to compute 17 * 23.\n\nLet me do 17 * 20 = 340, and 17 * 3 = 51"
case(
    "qwen3_truncated",
    "qwen3",
    qwen_prompt("What is 17 * 23?"),
    "<think>\n" + _q_trunc,
    _q_trunc,
    "",
    None,
)
case(
    "qwen3_two_blocks",  # two stretches of one part are joined by a blank line
    "qwen3",
    qwen_prompt("How many pencils in 3 boxes of 4?"),
    "<think>\nThree boxes, four each.\n</think>\n\nThere are 3 boxes.\n\n"
    "<think>\nHmm, let me reconsider: 3 * 4 = 12.\n</think>\n\nSo the total is \\boxed{12}.",
    "Three boxes, four each.\n\nHmm, let me reconsider: 3 * 4 = 12.",
    "There are 3 boxes.\n\nSo the total is \\boxed{12}.",
    "12",
)
case(
    "qwen3_no_markers",  # no marker anywhere: qwen3 starts outside, all content
    "qwen3",
    qwen_prompt("Say hi."),
    "Hello! How can I help you today?",
    "",
    "Hello! How can I help you today?",
    None,
)
case(
    "qwen3_multiturn_prompt",  # last marker of the prompt is an open <think>
    "qwen3",
    qwen_prompt("Hi", QWEN_OFF) + "Hello!<|im_end|>\n" + qwen_prompt("2 + 2?", QWEN_OPEN),
    "2 + 2 = 4.\n</think>\n\nThe answer is 4.",
    "2 + 2 = 4.",
    "The answer is 4.",
    "4",
)

# SmolLM2 / Llama-style plain chat.
_p_apples_r = (
    "To find out how many apples Tom has, let's break it down step by step.\n\n"
    "1. Tom starts with 5 apples.\n2. He buys 7 more apples.\n3. Adding them together: "
    "5 + 7 = 12."
)
_p_apples_c = "So, Tom has 12 apples in total. The answer is 12 apples.\n\nI hope this helps!"
case(
    "plain_list_units_hope",
    "plain",
    smol_prompt("Tom has 5 apples and buys 7 more. How many apples does he have?"),
    _p_apples_r + "\n\n" + _p_apples_c,
    _p_apples_r,
    _p_apples_c,
    "12 apples",
)
case(
    "plain_gsm8k_hashes",  # steps one per line, then #### in the same paragraph
    "plain",
    smol_prompt("A store sells 300 shirts a week. How many in 4 weeks?"),
    "The store sells 300 shirts each week.\nIn 4 weeks it sells 300 * 4 = 1,200 shirts.\n"
    "#### 1,200",
    "The store sells 300 shirts each week.\nIn 4 weeks it sells 300 * 4 = 1,200 shirts.",
    "#### 1,200",
    "1200",
)
_p_llama_r = (
    "Let's solve this step by step.\n\n"
    "**Step 1:** Each box holds 4 pencils, and there are 3 boxes.\n\n"
    "**Step 2:** Multiply: 3 × 4 = 12."
)
case(
    "plain_final_answer_bold_label",
    "plain",
    llama_prompt("3 boxes hold 4 pencils each. How many pencils?"),
    _p_llama_r + "\n\n**Final Answer:** 12",
    _p_llama_r,
    "**Final Answer:** 12",
    "12",
)
_p_bold_r = (
    "The temperature was 5°C in the morning and dropped by 8°C overnight.\n\n"
    "To find the new temperature, subtract: 5 - 8 = -3."
)
case(
    "plain_bold_answer_last",  # bold does not count for the split: the last paragraph
    "plain",
    smol_prompt("It was 5°C and dropped 8°C. What is it now?"),
    _p_bold_r + "\n\nSo the temperature overnight was **-3°C**.",
    _p_bold_r,
    "So the temperature overnight was **-3°C**.",
    "-3°C",
)
_p_bold_hope_r = (
    "Maria bakes 3 trays of cookies with 4 cookies on each tray.\n\n"
    "3 × 4 = 12, so she has **12 cookies**."
)
case(
    "plain_bold_then_hope",  # bold alone is no answering paragraph: content = last paragraph
    "plain",
    smol_prompt("Maria bakes 3 trays of 4 cookies. How many cookies?"),
    _p_bold_hope_r + "\n\nI hope this helps!",
    _p_bold_hope_r,
    "I hope this helps!",
    "12 cookies",
)
_p_money_r = (
    "A sandwich costs $8.25 and a drink costs $7.25.\n\n"
    "Adding the two prices: $8.25 + $7.25 = $15.50."
)
case(
    "plain_dollars",
    "plain",
    smol_prompt("A sandwich costs $8.25 and a drink $7.25. What is the total?"),
    _p_money_r + "\n\nThe answer is $15.50.",
    _p_money_r,
    "The answer is $15.50.",
    "$15.50",
)
_p_half_r = (
    "If 7 pizzas are shared equally between 2 people, each person gets 7 / 2 pizzas.\n\n7 / 2 = 3.5"
)
case(
    "plain_decimal_sentence_end",
    "plain",
    smol_prompt("7 pizzas shared by 2 people: how many each?"),
    _p_half_r + "\n\nThe answer is 3.5. Each person gets three and a half pizzas.",
    _p_half_r,
    "The answer is 3.5. Each person gets three and a half pizzas.",
    "3.5",
)
_p_42_r = (
    "## Step 1: Identify the numbers\nWe need to multiply 6 by 7.\n\n"
    "## Step 2: Multiply\n6 × 7 = 42."
)
case(
    "plain_llama_final_answer_dollars",
    "plain",
    llama_prompt("What is 6 times 7?"),
    _p_42_r + "\n\nThe final answer is $42$.",
    _p_42_r,
    "The final answer is $42$.",
    "42",
)
_p_sys_r = (
    "We have two equations: x + y = 11 and x - y = -3.\n\n"
    "Adding them gives 2x = 8, so x = 4. Substituting back, y = 11 - 4 = 7."
)
case(
    "plain_answer_line_pair",
    "plain",
    smol_prompt("Solve x + y = 11, x - y = -3."),
    _p_sys_r + "\n\nAnswer: x = 4, y = 7",
    _p_sys_r,
    "Answer: x = 4, y = 7",
    "x = 4, y = 7",
)
case(
    "plain_steps_then_answer_is",  # SmolLM2: one step per line, "The answer is" right after
    "plain",
    smol_prompt("Sarah has 3 bags of 4 cookies and gives away 5. How many are left?"),
    "Sarah has 3 bags with 4 cookies each.\n3 * 4 = 12\nShe gives away 5 cookies.\n"
    "12 - 5 = 7\nThe answer is 7.",
    "Sarah has 3 bags with 4 cookies each.\n3 * 4 = 12\nShe gives away 5 cookies.\n12 - 5 = 7",
    "The answer is 7.",
    "7",
)
case(
    "plain_answer_mid_paragraph",
    "plain",
    smol_prompt("What is 3 + 4?"),
    "Let me check.\nSo 3 + 4 = 7.\nThe answer is 7.\nThat seems right.",
    "Let me check.\nSo 3 + 4 = 7.",
    "The answer is 7.\nThat seems right.",
    "7",
)
case(
    "plain_answer_first",
    "plain",
    smol_prompt("Tom has 5 apples and buys 7 more. How many?"),
    "The answer is 12.\n\nHere's why: 5 + 7 = 12.\n\nI hope this helps!",
    "",
    "The answer is 12.\n\nHere's why: 5 + 7 = 12.\n\nI hope this helps!",
    "12",
)
case(
    "plain_one_paragraph_chat",
    "plain",
    smol_prompt("What is the capital of France?"),
    "The capital of France is Paris.",
    "",
    "The capital of France is Paris.",
    None,
)
case(
    "plain_one_paragraph_list",
    "plain",
    smol_prompt("Name three fruits."),
    "Sure! Here are three fruits:\n1. Apple\n2. Banana\n3. Cherry",
    "",
    "Sure! Here are three fruits:\n1. Apple\n2. Banana\n3. Cherry",
    None,
)
case(
    "plain_no_answer_paragraphs",
    "plain",
    smol_prompt("What is photosynthesis?"),
    "Photosynthesis is the process plants use to turn light, water and carbon dioxide into "
    "glucose and oxygen.\n\nIt mainly takes place in the chloroplasts.\n\nI hope this helps!",
    "Photosynthesis is the process plants use to turn light, water and carbon dioxide into "
    "glucose and oxygen.\n\nIt mainly takes place in the chloroplasts.",
    "I hope this helps!",
    None,
)
_p_corr_r = (
    "Tom had 5 apples and bought 5 more, so 5 + 5 = 10. The answer is 10.\n\n"
    "Wait, I forgot the 2 apples Tom found on the way home."
)
case(
    "plain_corrected_last_wins",
    "plain",
    smol_prompt("Tom had 5 apples, bought 5 and found 2. How many?"),
    _p_corr_r + "\n\nSo the total is 10 + 2 = 12. The answer is 12.",
    _p_corr_r,
    "So the total is 10 + 2 = 12. The answer is 12.",
    "12",
)
_p_neg_r = (
    "We need to compute -2 × 3.\n\n"
    "Multiplying a negative by a positive gives a negative: -2 × 3 = -6."
)
case(
    "plain_boxed_negative",
    "plain",
    smol_prompt("What is -2 times 3?"),
    _p_neg_r + "\n\nTherefore, the answer is $\\boxed{-6}$.",
    _p_neg_r,
    "Therefore, the answer is $\\boxed{-6}$.",
    "-6",
)

case(
    "plain_answer_word_is_no_answer",  # "To answer this" states no answer; bold is found
    "plain",
    smol_prompt("Tom has 5 apples and buys 7 more. How many?"),
    "To answer this question, we need to add 5 and 7.\n\n5 + 7 = 12\n\nSo Tom has **12** apples.\n",
    "To answer this question, we need to add 5 and 7.\n\n5 + 7 = 12",
    "So Tom has **12** apples.",
    "12",
)

# The bundled tiny reasoner: one step a line, `Answer: <value>`.
case(
    "tiny_add", "tiny", "Q: What is 3 + 4?\n", "3 + 4 = 7\nAnswer: 7", "3 + 4 = 7", "Answer: 7", "7"
)
case(
    "tiny_pair",
    "tiny",
    "Q: Solve x + y = 11, x - y = -3.\n",
    "x + y = 11\nx - y = -3\n2x = 8\nx = 4\ny = 11 - 4 = 7\nAnswer: x = 4, y = 7",
    "x + y = 11\nx - y = -3\n2x = 8\nx = 4\ny = 11 - 4 = 7",
    "Answer: x = 4, y = 7",
    "x = 4, y = 7",
)
case(
    "tiny_negative_trailing_newline",
    "tiny",
    "Q: What is 5 - 8?\n",
    "5 - 8 = -3\nAnswer: -3\n",
    "5 - 8 = -3",
    "Answer: -3",
    "-3",
)
case(
    "tiny_two_answers_last_wins",
    "tiny",
    "Q: What is 2 * 6?\n",
    "2 * 6 = 10\nAnswer: 10\n2 * 6 = 12\nAnswer: 12",
    "2 * 6 = 10\nAnswer: 10\n2 * 6 = 12",
    "Answer: 12",
    "12",
)
case(
    "tiny_no_answer",
    "tiny",
    "Q: What is 12 * 3 + 4?\n",
    "12 * 3 = 36\n36 + 4 = 40",
    "12 * 3 = 36\n36 + 4 = 40",
    "",
    None,
)

# Known failures: (test name, case id) -> reason. Filled in from the run, never by editing an
# expectation to match the code.
XFAIL: dict[tuple[str, str], str] = {}


def params(test: str, cases=None):
    out = []
    for c in CASES if cases is None else cases:
        reason = XFAIL.get((test, c.id))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


MARKED = [c for c in CASES if THINK in c.text or END in c.text]


# --- helpers -----------------------------------------------------------------------------------


def parts(s) -> tuple[str, str]:
    assert isinstance(s, Split), f"expected a Split, got {type(s).__name__}"
    return (s.reasoning, s.content)


def stream(fmt, prompt: str, deltas) -> tuple[str, str]:
    sp = fmt.splitter(prompt)
    r, c = [], []
    for d in deltas:
        out = parts(sp.feed(d))
        r.append(out[0])
        c.append(out[1])
    out = parts(sp.flush())
    r.append(out[0])
    c.append(out[1])
    return ("".join(r), "".join(c))


def cut(text: str, points) -> list[str]:
    points = sorted(set(points))
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def whole(c: Case) -> tuple[str, str]:
    return parts(get_format(c.fmt).split(c.text, c.prompt))


# --- 1/2: the split and streaming --------------------------------------------------------------


@pytest.mark.parametrize("c", params("test_split"))
def test_split(c: Case):
    got = whole(c)
    if c.reasoning is not SKIP:
        assert got[0] == c.reasoning
    if c.content is not SKIP:
        assert got[1] == c.content


@pytest.mark.parametrize("c", params("test_stream_every_single_cut"))
def test_stream_every_single_cut(c: Case):
    fmt, want = get_format(c.fmt), whole(c)
    for i in range(len(c.text) + 1):
        assert stream(fmt, c.prompt, [c.text[:i], c.text[i:]]) == want, f"cut at {i}"


@pytest.mark.parametrize("c", params("test_stream_random_cuts"))
def test_stream_random_cuts(c: Case):
    fmt, want = get_format(c.fmt), whole(c)
    rng = random.Random(f"heldout:{c.id}")
    n = len(c.text)
    for trial in range(200):
        k = rng.randint(1, max(1, min(40, n)))
        points = [rng.randint(0, n) for _ in range(k)]
        deltas = cut(c.text, points)
        assert stream(fmt, c.prompt, deltas) == want, f"trial {trial}: {deltas!r}"


@pytest.mark.parametrize("c", params("test_stream_token_like"))
def test_stream_token_like(c: Case):
    fmt, want = get_format(c.fmt), whole(c)
    rng = random.Random(f"tokens:{c.id}")
    for trial in range(20):
        deltas, i = [], 0
        while i < len(c.text):
            step = rng.randint(1, 4)
            deltas.append(c.text[i : i + step])
            i += step
        assert stream(fmt, c.prompt, deltas) == want, f"trial {trial}"
    assert stream(fmt, c.prompt, list(c.text)) == want, "one character a delta"


@pytest.mark.parametrize("c", params("test_stream_matches_expected"))
def test_stream_matches_expected(c: Case):
    got = stream(get_format(c.fmt), c.prompt, [c.text])
    if c.reasoning is not SKIP:
        assert got[0] == c.reasoning
    if c.content is not SKIP:
        assert got[1] == c.content


# --- 3: markers cut across deltas, both markers in one delta, empty and blank deltas -----------


def marker_spans(text: str):
    for m in (THINK, END):
        start = text.find(m)
        while start != -1:
            yield start, len(m)
            start = text.find(m, start + 1)


@pytest.mark.parametrize("c", params("test_marker_cut_everywhere", MARKED))
def test_marker_cut_everywhere(c: Case):
    fmt, want = get_format(c.fmt), whole(c)
    for p, n in marker_spans(c.text):
        # every character of the marker its own delta
        deltas = [c.text[:p], *c.text[p : p + n], c.text[p + n :]]
        assert stream(fmt, c.prompt, deltas) == want
        # every pair of cut points in and around the marker
        for i in range(p - 1, p + n + 2):
            for j in range(i, p + n + 2):
                pts = [max(0, min(len(c.text), x)) for x in (i, j)]
                assert stream(fmt, c.prompt, cut(c.text, pts)) == want, (i, j)


@pytest.mark.parametrize("c", params("test_empty_and_blank_deltas"))
def test_empty_and_blank_deltas(c: Case):
    fmt, want = get_format(c.fmt), whole(c)
    sp = fmt.splitter(c.prompt)
    assert parts(sp.feed("")) == ("", "")
    # empty deltas between every token-ish piece
    rng = random.Random(f"empty:{c.id}")
    pieces = cut(c.text, [rng.randint(0, len(c.text)) for _ in range(15)])
    with_empties = [x for p in pieces for x in ("", p, "")]
    assert stream(fmt, c.prompt, with_empties) == want
    # each run of whitespace a delta of its own
    pts, i = [], 0
    while i < len(c.text):
        if c.text[i].isspace():
            j = i
            while j < len(c.text) and c.text[j].isspace():
                j += 1
            pts += [i, j]
            i = j
        else:
            i += 1
    deltas = cut(c.text, pts)
    assert stream(fmt, c.prompt, deltas) == want


def test_both_markers_in_one_delta():
    q = get_format("qwen3")
    prompt = qwen_prompt("2 + 2?")
    text = "<think>\nTwo plus two is four.\n</think>\n\nThe answer is 4."
    want = ("Two plus two is four.", "The answer is 4.")
    assert parts(q.split(text, prompt)) == want
    assert stream(q, prompt, [text]) == want
    assert (
        stream(q, prompt, ["<think>\nTwo plus two is four.\n</think>", "\n\nThe answer is 4."])
        == want
    )
    assert (
        stream(q, prompt, ["<thi", "nk>\nTwo plus two is four.\n</think>\n\nThe ans", "wer is 4."])
        == want
    )
    # a delta that closes one block and opens the next
    text2 = "<think>\nA.\n</think>\n\nB.\n\n<think>\nC.\n</think>\n\nD."
    want2 = ("A.\n\nC.", "B.\n\nD.")
    assert parts(q.split(text2, prompt)) == want2
    assert (
        stream(q, prompt, ["<think>\nA.", "\n</think>\n\nB.\n\n<think>\nC.\n</", "think>\n\nD."])
        == want2
    )
    r1 = get_format("deepseek_r1")
    p1 = r1_prompt("2 + 2?")
    text3 = "<think>\nTwo plus two is four.\n</think>\n\n**4**"
    assert stream(r1, p1, [text3]) == ("Two plus two is four.", "**4**")


def test_blank_delta_at_the_part_edge():
    r1 = get_format("deepseek_r1")
    p = r1_prompt("6 * 7?")
    deltas = ["Okay", ", 6 * 7 = 42.", "\n", "</think>", "\n\n", "   ", "The answer is ", "42", "."]
    text = "".join(deltas)
    assert (
        stream(r1, p, deltas)
        == parts(r1.split(text, p))
        == (
            "Okay, 6 * 7 = 42.",
            "The answer is 42.",
        )
    )
    # trailing whitespace fed after the last word must not reach either part
    assert stream(r1, p, ["Okay.", "\n</think>\n\nDone.", "\n\n", " \n"]) == ("Okay.", "Done.")


def test_empty_generation():
    for name in ("tiny", "deepseek_r1", "qwen3", "plain"):
        fmt = get_format(name)
        assert parts(fmt.split("", "")) == ("", "")
        assert parts(fmt.splitter("").flush()) == ("", "")


# --- 4: force_text ------------------------------------------------------------------------------


def test_force_r1_thinking_open():
    r1 = get_format("deepseek_r1")
    p = r1_prompt("Tom has 5 apples and buys 7 more. How many?")
    text = "Okay, so 5 + 7 = 12.\n\nLet me double-check"
    ft = r1.force_text(text, p)
    assert ft == "\n</think>\n\nThe answer is \\boxed{"
    assert r1.in_thinking(text, p)
    assert not r1.in_thinking(text + ft, p)
    forced = text + ft + "12}"
    assert parts(r1.split(forced, p)) == (
        "Okay, so 5 + 7 = 12.\n\nLet me double-check",
        "The answer is \\boxed{12}",
    )
    assert r1.find_answer(forced, p) == "12"


def test_force_r1_after_close():
    r1 = get_format("deepseek_r1")
    p = r1_prompt("Tom has 5 apples and buys 7 more. How many?")
    text = "Okay, 5 + 7 = 12.\n</think>\n\nTom has 5 apples and buys 7, so"
    ft = r1.force_text(text, p)
    assert END not in ft
    assert ft.endswith("The answer is \\boxed{")
    forced = text + ft + "12}"
    assert (text + ft).count(END) == 1
    assert r1.split(forced, p).reasoning == "Okay, 5 + 7 = 12."
    assert r1.find_answer(forced, p) == "12"


def test_force_qwen3():
    q = get_format("qwen3")
    off = qwen_prompt("5 + 7?", QWEN_OFF)
    text = "5 + 7 = 12"
    ft = q.force_text(text, off)
    assert END not in ft and ft.endswith("The answer is \\boxed{")
    assert q.split(text + ft + "12}", off).reasoning == ""
    assert q.find_answer(text + ft + "12}", off) == "12"
    # thinking on, the model opened the block itself: closed first
    on = qwen_prompt("5 + 7?")
    text = "<think>\nOkay, 5 + 7 = 12"
    assert q.force_text(text, on) == "\n</think>\n\nThe answer is \\boxed{"
    # no marker yet and none in the prompt: qwen3 starts outside, nothing to close
    assert END not in q.force_text("", on)


def test_force_plain():
    pl = get_format("plain")
    p = smol_prompt("Tom has 5 apples and buys 7 more. How many?")
    text = "Tom has 5 apples and buys 7 more, so 5 + 7 = 12."
    ft = pl.force_text(text, p)
    assert ft == "\n\nThe answer is "
    forced = text + ft + "12."
    assert parts(pl.split(forced, p)) == (text, "The answer is 12.")
    assert pl.find_answer(forced, p) == "12"
    # no newlines doubled
    for tail in ("\n", "\n\n"):
        ft = pl.force_text(text + tail, p)
        joined = text + tail + ft
        assert joined.endswith("12.\n\nThe answer is "), repr(joined)


def test_force_tiny():
    t = get_format("tiny")
    assert t.force_text("3 + 4 = 7", "Q: 3 + 4?\n") == "\nAnswer:"
    assert t.force_text("3 + 4 = 7\n", "Q: 3 + 4?\n") == "Answer:"
    forced = "3 + 4 = 7" + t.force_text("3 + 4 = 7") + " 7"
    assert parts(t.split(forced)) == ("3 + 4 = 7", "Answer: 7")
    assert t.find_answer(forced) == "7"


def test_answer_max_tokens():
    for name in ("tiny", "deepseek_r1", "qwen3", "plain"):
        assert get_format(name).answer_max_tokens == 24


# --- 5: find_answer ------------------------------------------------------------------------------


@pytest.mark.parametrize("c", params("test_find_answer"))
def test_find_answer(c: Case):
    if c.answer is SKIP:
        pytest.skip("not determined by the spec")
    assert get_format(c.fmt).find_answer(c.text, c.prompt) == c.answer


def test_generic_vs_format_find_answer():
    # the generic finder sees the box in the thinking; the format reads the content first
    c = next(c for c in CASES if c.id == "r1_content_first")
    assert find_answer(c.text) == "10"
    assert get_format("deepseek_r1").find_answer(c.text, c.prompt) == "12"


GENERIC = [
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("So the area is \\fbox{5}.", "5"),
    ("So x = \\boxed{7", None),
    ("The answer is 3.5.", "3.5"),
    ("The answer is 3.5. Each gets three and a half.", "3.5"),
    ("The final answer is $42$.", "42"),
    ("The final answer is: $\\boxed{42}$", "42"),
    ("#### 1,200", "1200"),
    ("\\boxed{1,200}", "1200"),
    ("Answer: x = 4, y = 7", "x = 4, y = 7"),
    ("**Answer:** 12", "12"),
    ("Final Answer: 12", "12"),
    ("The answer is \\(12\\).", "12"),
    ("\\boxed{\\text{Paris}}", "Paris"),
    ("So we get **72**.", "72"),
    ("The answer is 12. Some say **15**.", "12"),
    ("The answer is 12.\n\nActually, \\boxed{15}", "15"),
    ("First \\boxed{10}, then \\boxed{12}.", "12"),
    ("The answer is 10. Wait. The answer is 12.", "12"),
    ("The answer is -3.", "-3"),
    ("The answer is 12 apples.", "12 apples"),
    ("The answer is $15.50.", "$15.50"),
    ("$\\boxed{x = 5}$", "x = 5"),
    ("I don't know.", None),
]


@pytest.mark.parametrize(("text", "want"), GENERIC, ids=[t for t, _ in GENERIC])
def test_generic_find_answer(text, want):
    assert find_answer(text) == want


# --- the rest of the interface -------------------------------------------------------------------


def test_in_thinking():
    r1, q = get_format("deepseek_r1"), get_format("qwen3")
    p = r1_prompt("x?")
    assert r1.in_thinking("", p)
    assert r1.in_thinking("Okay, so", p)
    assert not r1.in_thinking("Okay.\n</think>\n\nSo", p)
    assert r1.in_thinking("", "")  # no marker in the prompt: deepseek_r1 starts inside
    assert not q.in_thinking("", qwen_prompt("x?"))  # ... qwen3 outside
    assert q.in_thinking("<think>\nHmm", qwen_prompt("x?"))
    assert not q.in_thinking("", qwen_prompt("x?", QWEN_OFF))
    assert q.in_thinking("", qwen_prompt("x?", QWEN_OPEN))
    assert not r1.in_thinking("", "<｜User｜>x<｜Assistant｜><think>\n\n</think>\n\n")
    assert q.in_thinking("<think>\nA\n</think>\n\nB\n\n<think>\nC", qwen_prompt("x?"))


def test_is_answer_step():
    for name in ("deepseek_r1", "qwen3"):
        f = get_format(name)
        assert f.is_answer_step("Tom starts with 5 apples.", True)
        assert f.is_answer_step("Yes, that's right.\n</think>", False)
        assert not f.is_answer_step("So the answer is 12.", False)
        assert not f.is_answer_step("Wait, let me double-check.", False)
    pl = get_format("plain")
    assert pl.is_answer_step("So the answer is 12.", False)
    assert pl.is_answer_step("#### 72", False)
    assert pl.is_answer_step("Answer: x = 4, y = 7", False)
    assert pl.is_answer_step("Therefore, $\\boxed{-6}$.", False)
    assert not pl.is_answer_step("So she has **12 cookies**.", False)
    assert not pl.is_answer_step("1. Tom starts with 5 apples.", False)
    t = get_format("tiny")
    assert t.is_answer_step("Answer: 7", False)
    assert not t.is_answer_step("3 + 4 = 7", False)


def test_strip_markers():
    for name in ("deepseek_r1", "qwen3"):
        out = get_format(name).strip_markers("<think>\nOkay, 5 + 7 = 12.\n</think>\n\nIt is 12.")
        assert THINK not in out and END not in out
        assert "Okay, 5 + 7 = 12." in out and "It is 12." in out
    assert get_format("tiny").strip_markers("3 + 4 = 7") == "3 + 4 = 7"
    assert get_format("plain").strip_markers("So 5 + 7 = 12.") == "So 5 + 7 = 12."


def test_probe_answer():
    for name in ("deepseek_r1", "qwen3"):
        f = get_format(name)
        assert f.probe_answer("12}.\n\nBut") == "12"
        assert f.probe_answer("\\frac{3}{4}} apples") == "\\frac{3}{4}"
        assert f.probe_answer("12") is None  # the brace never closed
    assert get_format("plain").probe_answer(" 7.\n\nBut") == "7"
    assert get_format("tiny").probe_answer(" 7\n3 + 4") == "7"


def test_names():
    assert get_format("deepseek-r1").split("a</think>b") == get_format("deepseek_r1").split(
        "a</think>b"
    )
    with pytest.raises(ValueError) as e:
        get_format("no-such-format")
    for name in ("tiny", "deepseek_r1", "qwen3", "plain"):
        assert name in str(e.value)
