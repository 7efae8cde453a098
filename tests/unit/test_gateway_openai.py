"""The OpenAI request mapping (pure): thinking budgets, reasoning effort, streaming, verify, and
the ecosystem's reasoning fields (template kwargs, include/separate/stream reasoning, usage)."""

import pytest

from pipeline import schema
from pipeline.gateway.openai_api import (
    ChatRequest,
    StreamDeltas,
    answer_text,
    reasoning_text,
    response_message,
    rollback_marker,
    to_job,
    usage,
)
from pipeline.gateway.service import GatewayError

MSG = [{"role": "user", "content": "What is 2 + 3?"}]


def job(**kw) -> schema.Job:
    return to_job(ChatRequest(model="m", messages=MSG, **kw), "m")


def test_thinking_budgets_map_onto_the_job():
    assert job().params.max_thinking_tokens is None
    assert job(thinking_token_budget=300).params.max_thinking_tokens == 300
    assert job(reasoning_effort="low").params.max_thinking_tokens == 256
    assert job(reasoning_effort="high").params.max_thinking_tokens == 4096
    assert job(reasoning_effort="high", thinking_token_budget=100).params.max_thinking_tokens == 100
    with pytest.raises(GatewayError) as e:
        job(reasoning_effort="extreme")
    assert e.value.status == 400 and e.value.field == "reasoning_effort"


def test_streams_tokens_and_takes_verify():
    assert job(stream=True).params.stream == "tokens"
    assert job().params.stream == "steps"
    assert job(verify="off").params.verify == "off"
    with pytest.raises(GatewayError):
        job(verify="sometimes")


def test_content_and_reasoning_come_from_the_split():
    r = schema.Result(id="j", status="ok", text="x", reasoning="think", content="ans", ts_ms=1)
    assert (answer_text(r), reasoning_text(r)) == ("ans", "think")
    empty = schema.Result(id="j", status="ok", text="", reasoning="", content="", ts_ms=1)
    assert reasoning_text(empty) is None  # null, as vLLM sends no reasoning
    old = schema.Result(id="j", status="ok", text="1 + 1 = 2\nAnswer: 2", answer="2", ts_ms=1)
    assert answer_text(old) == "Answer: 2"  # a Result from before the split (cached)


# --- the ecosystem's reasoning fields (issue 37) ------------------------------------------------


def test_chat_template_kwargs_and_reasoning_effort_reach_the_template():
    assert job().chat_template_kwargs is None
    off = job(chat_template_kwargs={"enable_thinking": False})
    assert off.chat_template_kwargs == {"enable_thinking": False}
    assert job(chat_template_kwargs={"thinking": True}).chat_template_kwargs == {"thinking": True}
    # reasoning_effort goes to the template too (gpt-oss reads it), switching thinking as vLLM.
    low = job(reasoning_effort="low")
    assert low.chat_template_kwargs == {"reasoning_effort": "low", "enable_thinking": True}
    none = job(reasoning_effort="none")
    assert none.chat_template_kwargs["enable_thinking"] is False
    assert none.params.max_thinking_tokens is None  # the template switches it off; no cap
    kept = job(reasoning_effort="none", chat_template_kwargs={"enable_thinking": True})
    assert kept.chat_template_kwargs["enable_thinking"] is True  # the request's own wins
    assert job(reasoning_effort="minimal").params.max_thinking_tokens == 64


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (
            {"chat_template_kwargs": {"enable_thinking": [1, 2]}},
            "chat_template_kwargs.enable_thinking",
        ),
        ({"chat_template_kwargs": {"tokenize": True}}, "chat_template_kwargs.tokenize"),
        ({"chat_template_kwargs": {"bad key": 1}}, "chat_template_kwargs.bad key"),
        ({"skip_reasoning": True}, "skip_reasoning"),
        ({"logprobs": True}, "logprobs"),
        ({"stream": True, "separate_reasoning": False}, "separate_reasoning"),
    ],
)
def test_a_field_not_implemented_is_a_400_naming_it(kwargs, field):
    with pytest.raises(GatewayError) as e:
        job(**kwargs)
    assert e.value.status == 400 and e.value.field == field


def test_an_earlier_turns_reasoning_goes_to_the_template():
    msgs = [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "5", "reasoning_content": "2 + 3 = 5."},
        {"role": "user", "content": "And times 4?"},
    ]
    j = to_job(ChatRequest(model="m", messages=msgs), "m")
    assert (
        j.messages[1].reasoning_content == "2 + 3 = 5." and j.messages[2].reasoning_content is None
    )
    msgs[1] = {"role": "assistant", "content": "5", "reasoning": "vLLM's newer name."}
    j = to_job(ChatRequest(model="m", messages=msgs), "m")
    assert j.messages[1].reasoning_content == "vLLM's newer name."
    with pytest.raises(GatewayError) as e:
        bad = [{"role": "user", "content": "hi", "reasoning_content": "no"}]
        to_job(ChatRequest(model="m", messages=bad), "m")
    assert e.value.field == "messages[0].reasoning_content"
    with pytest.raises(GatewayError) as e:
        to_job(ChatRequest(model="m", messages=[{**MSG[0], "tool_calls": []}]), "m")
    assert e.value.field == "messages[0].tool_calls"


RESULT = schema.Result(
    id="j", status="ok", text="<think>\n2 + 3 = 5.\n</think>\n\nIt is $\\boxed{5}$.",
    reasoning="2 + 3 = 5.", content="It is $\\boxed{5}$.", ts_ms=1,
    usage=schema.Usage(prompt_tokens=12, completion_tokens=20, reasoning_tokens=8),
)  # fmt: skip


def test_usage_counts_reasoning_tokens():
    u = usage(RESULT)
    assert u["completion_tokens_details"] == {"reasoning_tokens": 8}
    assert u["total_tokens"] == 32


def test_include_and_separate_reasoning_shape_the_message():
    req = ChatRequest(model="m", messages=MSG)
    assert response_message(req, RESULT)["reasoning_content"] == "2 + 3 = 5."
    hidden = response_message(ChatRequest(model="m", messages=MSG, include_reasoning=False), RESULT)
    assert hidden["reasoning_content"] is None and hidden["content"] == "It is $\\boxed{5}$."
    raw = response_message(ChatRequest(model="m", messages=MSG, separate_reasoning=False), RESULT)
    assert raw == {"role": "assistant", "content": RESULT.text}


def test_stream_deltas_follow_include_and_stream_reasoning():
    live = StreamDeltas(ChatRequest(model="m", messages=MSG))
    assert live.reasoning("2 + 3") == [{"reasoning_content": "2 + 3", "reasoning": "2 + 3"}]
    assert live.content("5") == [{"content": "5"}]
    held = StreamDeltas(ChatRequest(model="m", messages=MSG, stream_reasoning=False))
    assert held.reasoning("2 + 3") == [] and held.reasoning(" = 5.") == []
    both = "2 + 3 = 5."
    assert held.content("It is 5.") == [
        {"reasoning_content": both, "reasoning": both},
        {"content": "It is 5."},
    ]
    assert held.reasoning("\n[backtrack to step 1]\n") != []  # after it: as it comes
    hidden = StreamDeltas(ChatRequest(model="m", messages=MSG, include_reasoning=False))
    assert hidden.reasoning("2 + 3") == [] and hidden.content("5") == [{"content": "5"}]


def test_the_stream_says_what_decode_rolled_back_and_why():
    def event(**kw):
        return schema.Event(id="j", seq=3, kind="backtrack", ts_ms=0, step=1, **kw)

    assert rollback_marker(event(verdict="contradicted")) == "\n[backtrack to step 1]\n"
    # A forced answer after the checked chain cut the unfinished step: no resample.
    cut = event(detail="budget spent: the unfinished step is cut; the answer follows step 0")
    assert rollback_marker(cut) == "\n[cut back to step 1]\n"


# -- tools and structured output (issue 38) ------------------------------------------------

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}


def test_tools_and_tool_choice_map_onto_the_job():
    j = job(tools=[TOOL])
    assert j.tools[0].function.name == "get_weather" and j.tool_choice == "auto"
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert job(tools=[TOOL], tool_choice=named).tool_choice == "get_weather"
    assert job(tools=[TOOL], tool_choice="required", parallel_tool_calls=False).tool_choice == (
        "required"
    )
    for bad in ("sometimes", {"type": "function"}, {"type": "other", "function": {"name": "x"}}):
        with pytest.raises(GatewayError) as e:
            job(tools=[TOOL], tool_choice=bad)
        assert e.value.status == 400 and e.value.field == "tool_choice"


def test_tool_turns_reach_the_job():
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    msgs = [*MSG, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "21 C"}]  # fmt: skip
    j = to_job(ChatRequest(model="m", messages=msgs, tools=[TOOL]), "m")
    assert j.messages[1].tool_calls[0].function.arguments == '{"city": "Paris"}'
    assert j.messages[1].content == "" and j.messages[2].role == "tool"
    assert j.messages[2].tool_call_id == "c1"
    with pytest.raises(GatewayError) as e:
        to_job(ChatRequest(model="m", messages=[*MSG, {"role": "tool", "content": "x"}]), "m")
    assert e.value.field == "messages[1].tool_call_id"


@pytest.mark.parametrize(
    "kwargs, kind, spec",
    [
        ({"response_format": {"type": "json_object"}}, "json_object", ""),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": True},
                }
            },
            "json",
            '{"type": "object"}',
        ),  # fmt: skip
        ({"structured_outputs": {"regex": "[0-9]+"}}, "regex", "[0-9]+"),
        ({"structured_outputs": {"choice": ["a", "b"]}}, "choice", '["a", "b"]'),
        ({"structured_outputs": {"grammar": 'start: "x"'}}, "grammar", 'start: "x"'),
    ],
)
def test_structured_output_maps_onto_the_job(kwargs, kind, spec):
    so = job(**kwargs).structured_output
    assert so.kind == kind and so.spec == spec
    assert job(response_format={"type": "text"}).structured_output is None


@pytest.mark.parametrize(
    "kwargs, field, says",
    [
        ({"response_format": {"type": "nonsense"}}, "response_format.type", "must be"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "schema"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "schema": {"type": "object", "properties": {"a": {"type": "zzz"}}}
                    },
                }
            },
            "response_format",
            "invalid json",
        ),  # fmt: skip
        ({"structured_outputs": {"regex": "("}}, "structured_outputs", "invalid regex"),
        ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs", "one of"),
        ({"structured_outputs": {"yaml": "a"}}, "structured_outputs", "one of"),
        (
            {"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}},
            "structured_outputs",
            "not both",
        ),  # fmt: skip
        ({"logit_bias": {"abc": 1000}}, "logit_bias", "not supported"),
    ],
)
def test_structured_output_that_cannot_be_honoured_is_a_400(kwargs, field, says):
    with pytest.raises(GatewayError) as e:
        job(**kwargs)
    assert e.value.status == 400 and e.value.field == field and says in str(e.value)


def test_a_result_with_tool_calls_is_a_tool_calls_message():
    from pipeline.gateway.openai_api import finish_reason, tool_call_deltas

    call = schema.ToolCall(
        id="chatcmpl-tool-1", function=schema.FunctionCall(name="f", arguments='{"x": 1}')
    )
    result = schema.Result(id="j", status="ok", content="", tool_calls=[call], ts_ms=1)
    msg = response_message(ChatRequest(model="m", messages=MSG), result)
    assert msg["content"] is None and msg["tool_calls"][0]["function"]["name"] == "f"
    assert finish_reason(result) == "tool_calls"
    head, args = tool_call_deltas(0, call)
    assert tool_call_deltas(0, call, head=False) == [args]
    assert head["tool_calls"][0]["id"] == "chatcmpl-tool-1"
    assert head["tool_calls"][0]["function"] == {"name": "f", "arguments": ""}
    assert args["tool_calls"][0] == {"index": 0, "function": {"arguments": '{"x": 1}'}}


def test_streamed_call_events_add_up_as_the_openai_client_reads_them():
    """decode's events for a call written token by token (ToolOutput) become delta.tool_calls
    that the client adds up (id and name in the first, then argument fragments) to the call."""
    from pipeline.decode.tool_output import ToolOutput
    from pipeline.gateway.openai_api import call_event_deltas
    from pipeline.toolcalls import get_parser

    text = (
        'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "São Paulo", '
        '"days": 3}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}'
    )
    out, found = ToolOutput("job-9", "parse", get_parser("hermes")), []
    for ch in text:
        found += out.feed(ch)[1]
    found += out.flush()[1]
    events = [schema.Event(id="job-9", seq=n, kind=kind, step=i, tool_call=c, ts_ms=1)
              for n, (kind, i, c) in enumerate(found)]  # fmt: skip
    started: set[int] = set()
    deltas = [d for e in events for d in call_event_deltas(e, started)]
    calls: dict[int, dict] = {}
    for delta in deltas:
        (d,) = delta["tool_calls"]
        if d["index"] not in calls:
            assert d["id"].startswith("chatcmpl-tool-") and d["function"]["arguments"] == ""
            calls[d["index"]] = {"name": d["function"]["name"], "arguments": ""}
        else:
            assert "id" not in d and "name" not in d["function"]
        calls[d["index"]]["arguments"] += d["function"]["arguments"]
    assert calls == {
        0: {"name": "get_weather", "arguments": '{"city": "São Paulo", "days": 3}'},
        1: {"name": "get_time", "arguments": "{}"},
    }
    assert len(deltas) > 10  # the first call's arguments came in fragments
