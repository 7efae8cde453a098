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

# The families issue 37 added, each as its model writes (markers, tool calls, wrappers).
MISTRAL_TEXT = (
    "[THINK]Okay, 15% of 80: 10% of 80 is 8 and 5% is 4, so 8 + 4 = 12.[/THINK]"
    "15% of 80 is **12**.\n\n$$0.15 \\times 80 = \\boxed{12}$$"
)
SEED_TEXT = (
    "<seed:think>The area of a circle with radius 3 is $\\pi r^2 = 9\\pi$.\n\n"
    "That is about 28.27.</seed:think>The area is $9\\pi \\approx 28.27$, so $\\boxed{9\\pi}$."
)
GRANITE_TEXT = (
    "Here is my thought process:\nThe train covers 120 km in 2 hours.\n\n"
    "Speed = 120 / 2 = 60 km/h.\n\nHere is my response:\nThe average speed is **60 km/h**."
)
GLM_PROMPT = "[gMASK]<sop><|user|>\nWhat is 7 * 8?<|assistant|>\n"
GLM_TEXT = "<think>7 times 8 is 56. Check: 8 * 7 = 56.</think>\n$7 \\times 8 = \\boxed{56}$"
KIMI_CALL = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)
KIMI_TEXT = "Let me look up the weather in Paris before answering." + KIMI_CALL
HUNYUAN_TEXT = (
    "<think>\nA hexagon's interior angles sum to $(6-2) \\times 180 = 720$ degrees.\n</think>\n"
    "<answer>\nThey add up to $\\boxed{720}$ degrees.\n</answer>"
)
ERNIE_TEXT = (
    "The user asks for 2^10. 2^10 = 1024.\n</think>\n\n<response>\n$2^{10} = \\boxed{1024}$"
    "\n</response>\n"
)
MINIMAX_TEXT = (
    "I need the derivative of $x^3$; by the power rule it is $3x^2$.</think>\n\n"
    "The derivative is $\\boxed{3x^2}$."
)
V3_THINKING = "<｜User｜>What is 6 * 7?<｜Assistant｜><think>"
V3_NOT_THINKING = "<｜User｜>What is 6 * 7?<｜Assistant｜></think>"
GEMMA_TEXT = (
    "<|channel>thought\nThe user wants 25% of 60: 60 / 4 = 15.<channel|>25% of 60 is **15**."
)
NEMOTRON_PROMPT = "<|im_start|>user\nWhat is 9 squared?<|im_end|>\n<|im_start|>assistant\n<think>\n"
NEMOTRON_TEXT = "9 squared is 9 * 9 = 81.\n</think>\n\n$9^2 = \\boxed{81}$"
OLMO_TEXT = "<think>Let me count: 3 + 4 + 5 = 12.</think>\n\nThe total is **12**."
STEP3_TEXT = "The perimeter is 2 * (3 + 5) = 16.</think>The perimeter is $\\boxed{16}$."
HARMONY_PROMPT = "<|start|>user<|message|>What is 17 + 25?<|end|><|start|>assistant"
HARMONY_TEXT = (
    "<|channel|>analysis<|message|>We need to add 17 and 25.\n\n17 + 25 = 42.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>17 + 25 = **42**.\n\n$\\boxed{42}$<|return|>"
)
HARMONY_TOOL = (
    "<|channel|>analysis<|message|>I need the weather first.<|end|><|start|>assistant"
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}'
    "<|call|>"
)

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
    ("mistral", "", MISTRAL_TEXT),
    ("seed_oss", "", SEED_TEXT),
    ("granite", "", GRANITE_TEXT),
    ("glm45", GLM_PROMPT, GLM_TEXT),
    ("kimi_k2", "", KIMI_TEXT),
    ("hunyuan_a13b", "", HUNYUAN_TEXT),
    ("ernie45", "", ERNIE_TEXT),
    ("minimax_m2", "", MINIMAX_TEXT),
    ("minimax_m2_append_think", "", MINIMAX_TEXT),
    ("deepseek_v3", V3_THINKING, R1_TEXT),
    ("deepseek_v3", V3_NOT_THINKING, QWEN3_TEXT_OFF),
    ("gemma4", "", GEMMA_TEXT),
    ("nemotron_v3", NEMOTRON_PROMPT, NEMOTRON_TEXT),
    ("olmo3", "", OLMO_TEXT),
    ("step3", "", STEP3_TEXT),
    ("gpt_oss", HARMONY_PROMPT, HARMONY_TEXT),
    ("gpt_oss", HARMONY_PROMPT, HARMONY_TOOL),
]
