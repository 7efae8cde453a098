"""The R1-style reasoner's chat template: SmolLM2's rendering, to the character, where no tool
is involved (the adapter learned on it); tools and tool turns the Hermes way, which the
`hermes` parser reads back."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from pipeline.models.paths import smollm2_dir
from pipeline.models.r1_template import R1_CHAT_TEMPLATE
from pipeline.toolcalls import get_parser

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"}],
]  # fmt: skip
CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = {"name": "get_weather", "description": "Forecast", "parameters": CITY}
TOOLS = [{"type": "function", "function": WEATHER}]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(smollm2_dir()))


def render(tok, messages, template, **kw):
    return tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, chat_template=template, **kw
    )


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_without_tools_it_is_smollm2s_own(tokenizer, messages):
    assert render(tokenizer, messages, R1_CHAT_TEMPLATE) == render(
        tokenizer, messages, tokenizer.chat_template
    )


def test_tools_and_tool_turns_render_the_hermes_way(tokenizer):
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}  # fmt: skip
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 21}'},
    ]
    text = render(tokenizer, messages, R1_CHAT_TEMPLATE, tools=TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert json.dumps(TOOLS[0]) in text and text.count("<|im_start|>system") == 1
    assert '<tool_response>\n{"temp_c": 21}\n</tool_response>' in text
    turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    (parsed,) = get_parser("hermes").extract(turn).calls  # our parser reads our template's call
    assert parsed.name == "get_weather" and json.loads(parsed.arguments) == {"city": "Paris"}
