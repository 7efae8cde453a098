"""Realistic generations per format, shared by the format tests: (prompt, text) pairs."""

R1_PROMPT = "<｜begin▁of▁sentence｜><｜User｜>What is 3/4 of 12?<｜Assistant｜><think>\n"
R1_TEXT = (
    "Okay, so I need to find $\\frac{3}{4}$ of 12. Let me think about this.\n\n"
    "First, $\\frac{12}{4} = 3$, and then $3 \\times 3 = 9$.\n\n"
    "Wait, let me double-check: $0.75 \\times 12 = 9$. Yes, that's right.\n"
    "</think>\n\n"
    "To find $\\frac{3}{4}$ of 12:\n\n"
    "1. **Divide** by 4: $12 \\div 4 = 3$\n"
    "2. **Multiply** by 3: $3 \\times 3 = 9$\n\n"
    "The answer is $\\boxed{9}$."
)
R1_REASONING = (
    "Okay, so I need to find $\\frac{3}{4}$ of 12. Let me think about this.\n\n"
    "First, $\\frac{12}{4} = 3$, and then $3 \\times 3 = 9$.\n\n"
    "Wait, let me double-check: $0.75 \\times 12 = 9$. Yes, that's right."
)
R1_CONTENT = (
    "To find $\\frac{3}{4}$ of 12:\n\n"
    "1. **Divide** by 4: $12 \\div 4 = 3$\n"
    "2. **Multiply** by 3: $3 \\times 3 = 9$\n\n"
    "The answer is $\\boxed{9}$."
)
# An R1 distill that writes `<think>` again although the template opened the block.
R1_DOUBLE_OPEN = "<think>\nHmm, $x^2 = 16$ so $x = \\pm 4$.\n</think>\n\n$\\boxed{\\pm 4}$"
# Cut off by the length limit: no `</think>`.
R1_TRUNCATED = "Let me compute $\\int_0^1 x\\,dx$.\n\nThat is $\\frac{1}{2}$, so"

QWEN3_PROMPT_ON = (
    "<|im_start|>user\nSarah had 12 apples and gave away 5. How many are left?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
QWEN3_TEXT_ON = (
    "<think>\nOkay, the user is asking about apples. Sarah starts with 12 and gives 5 away.\n\n"
    "12 - 5 = 7. So she has 7 left.\n</think>\n\n"
    "Sarah has **7** apples left.\n\n$\\boxed{7}$"
)
QWEN3_PROMPT_OFF = QWEN3_PROMPT_ON + "<think>\n\n</think>\n\n"
QWEN3_TEXT_OFF = "Sarah has 12 - 5 = **7** apples left."

SMOL_TEXT = (
    "Sarah starts with 12 apples. She gives away 5 of them.\n\n"
    "12 - 5 = 7\n\n"
    "So, she has 7 apples left.\n\n"
    "The answer is 7."
)
SMOL_CHAT = "Hello! I'm an AI assistant. How can I help you today?"

TINY_TEXT = "3x = 22 - 7 = 15\nx = 15 / 3 = 5\nCheck: 3 * 5 + 7 = 22\nAnswer: 5\n"

# (format, prompt, text): every one is streamed at every cut in test_streaming.py.
# SmolLM2 writing one step per line, the answer on the last lines of the same paragraph.
SMOL_LINES = (
    "12 apples * 4 bags = 56 apples\nSo she has 12 + 3 = 17 apples now.\n#### 17\nThe answer is 17."
)

CASES = [
    ("deepseek_r1", R1_PROMPT, R1_TEXT),
    ("deepseek_r1", R1_PROMPT, R1_DOUBLE_OPEN),
    ("deepseek_r1", R1_PROMPT, R1_TRUNCATED),
    ("deepseek_r1", "", R1_TEXT),
    ("qwen3", QWEN3_PROMPT_ON, QWEN3_TEXT_ON),
    ("qwen3", QWEN3_PROMPT_OFF, QWEN3_TEXT_OFF),
    ("qwen3", QWEN3_PROMPT_ON, "Before. <think>inner</think> after <think> again"),
    ("qwen3", R1_PROMPT, R1_TEXT),
    ("plain", "", SMOL_TEXT),
    ("plain", "", SMOL_CHAT),
    ("plain", "", "The answer is 7.\n\nI hope this helps!\n\n"),
    ("plain", "", "Step one.\n\n\n  \n\nThe answer is 3.\n\nWait.\n\nThe answer is 4."),
    ("plain", "", R1_CONTENT),
    # Whitespace that is no line break (\x0b, a no-break space) right after a blank line.
    ("plain", "", "Think.\n\n\x0b\u00a0Then.\n\nThe answer is 2."),
    ("plain", "", SMOL_LINES),
    ("tiny", "", TINY_TEXT),
    ("tiny", "", "37 * 14 = 518\nAnswer: 518\n2 * 3 = 6\nAnswer: 6"),
    ("tiny", "", "Compute 7 + 8 = 15\nanswer"),
]
