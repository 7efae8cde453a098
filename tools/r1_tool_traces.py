"""Tool-use traces for the R1-style reasoner (issue 38, item 4): think, call a tool the Qwen /
Hermes way, read its result, think again, answer.

Three kinds of example, each a chat (`messages`, `tools`) and the assistant's completion:

* `call`: tools offered, a question one of them answers. The completion thinks in a short
  paragraph (which tool, which arguments, taken from the question), closes the thinking and
  writes `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, as the chat template's
  system text asks and the `hermes` parser reads.
* `answer`: the same chat one turn later: the assistant's call (content empty, as an OpenAI
  client sends it back) and the tool's result (`role: "tool"`). The completion reads the
  result in its thinking and answers from it.
* `plain`: tools offered that do not fit the question (an arithmetic problem): the completion
  is the ordinary R1-style trace, with no call.

The calculator's questions are the task generators' arithmetic problems (training split
only); its thinking states the problem's true relation, so verification of a trained model's
steps still reads real arithmetic. Every other tool's values (cities, amounts, symbols) come
from small pools and seeded draws. A pure function of (seed, index): `--resume` holds.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.evals.generators import make_problem
from pipeline.evals.problems import split_of
from tools.r1_style import r1_trace

CITIES = ("Paris", "Tokyo", "Lisbon", "Denver", "Nairobi", "Oslo", "Lima", "Seoul", "Cairo",
          "Toronto", "Madrid", "Sydney", "Boston", "Mumbai", "Berlin", "Austin", "Dublin",
          "Vienna", "Manila", "Quito", "Helsinki", "Chicago", "Athens", "Hanoi")  # fmt: skip
CONDITIONS = ("sunny", "cloudy", "rainy", "windy", "foggy", "snowing", "clear")
CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "INR", "BRL", "SEK")
SYMBOLS = ("AAPL", "MSFT", "NVDA", "AMZN", "TSLA", "GOOG", "META", "IBM", "INTC", "ORCL")
ZONES = {"Tokyo": "Asia/Tokyo", "Paris": "Europe/Paris", "Denver": "America/Denver",
         "Sydney": "Australia/Sydney", "Cairo": "Africa/Cairo", "Lima": "America/Lima",
         "Seoul": "Asia/Seoul", "Berlin": "Europe/Berlin", "Mumbai": "Asia/Kolkata",
         "Toronto": "America/Toronto"}  # fmt: skip


def _tool(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict:
    params = {"type": "object", "properties": props, "required": required}
    function = {"name": name, "description": description, "parameters": params}
    return {"type": "function", "function": function}


STR = {"type": "string"}
TOOLS = {
    "get_weather": _tool(
        "get_weather", "Get the current weather in a city.",
        {"location": {**STR, "description": "The city name"},
         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        ["location", "unit"],
    ),
    "calculate": _tool(
        "calculate", "Evaluate an arithmetic expression exactly.",
        {"expression": {**STR, "description": "The expression, e.g. 3 * (4 + 5)"}},
        ["expression"],
    ),
    "convert_currency": _tool(
        "convert_currency", "Convert an amount of money from one currency to another.",
        {"amount": {"type": "number"}, "from_currency": STR, "to_currency": STR},
        ["amount", "from_currency", "to_currency"],
    ),
    "get_stock_price": _tool(
        "get_stock_price", "Get the latest price of a stock by its ticker symbol.",
        {"symbol": {**STR, "description": "The ticker symbol, e.g. AAPL"}},
        ["symbol"],
    ),
    "get_local_time": _tool(
        "get_local_time", "Get the current local time in a time zone.",
        {"timezone": {**STR, "description": "An IANA time zone, e.g. Europe/Paris"}},
        ["timezone"],
    ),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Task:
    """One tool use: the question, the call it needs, the tool's result and the answer."""

    tool: str
    question: str
    arguments: dict[str, Any]
    why: str  # the thinking before the call
    result: dict[str, Any]
    reading: str  # the thinking after the result
    answer: str
    gold: str  # what a right answer says (its key value as the answer writes it)


def weather(rng: random.Random) -> Task:
    city, unit = rng.choice(CITIES), rng.choice(("celsius", "fahrenheit"))
    temp = rng.randint(-5, 35) if unit == "celsius" else rng.randint(20, 95)
    cond = rng.choice(CONDITIONS)
    q = rng.choice(("What's the weather like in {c} right now? Give me the temperature in {u}.",
                    "Is it warm in {c} today? Tell me in {u}.",
                    "How is the weather in {c}? Use {u}."))  # fmt: skip
    return Task(
        "get_weather", q.format(c=city, u=unit), {"location": city, "unit": unit},
        f"The user asks about the weather in {city}, in {unit}. The get_weather tool takes a "
        f"location and a unit, so I'll call it with location {city} and unit {unit}.",
        {"location": city, "temperature": temp, "unit": unit, "condition": cond},
        f"The tool says it is {temp} degrees {unit} in {city}, and {cond}.",
        f"It is {temp} degrees {unit.capitalize()} and {cond} in {city} right now.",
        f"{temp} degrees",
    )  # fmt: skip


def calculator(rng: random.Random) -> Task:
    family = rng.choice(("arith", "product", "signed"))
    index = rng.randrange(10**9)
    p = make_problem(family, 7_000_003, index)
    while split_of(p.question) != "train":  # never a held-out question text
        index += 1
        p = make_problem(family, 7_000_003, index)
    expr = re.sub(r"^[A-Za-z ]+", "", p.question).rstrip(".?")  # "What is 2 * 5?" -> "2 * 5"
    return Task(
        "calculate", p.question, {"expression": expr},
        f"I need the value of {expr}. I have a calculate tool that evaluates an expression "
        f"exactly, so I'll call it with {expr}.",
        {"result": int(p.answer)},
        f"The calculator returned {p.answer}, so {expr} = {p.answer}.",
        f"The answer is \\boxed{{{p.answer}}}.",
        f"\\boxed{{{p.answer}}}",
    )  # fmt: skip


def currency(rng: random.Random) -> Task:
    a, b = rng.sample(CURRENCIES, 2)
    amount = rng.choice((rng.randint(5, 999), rng.randint(1, 99) * 50))
    rate = round(rng.uniform(0.05, 3.0), 4)
    converted = round(amount * rate, 2)
    q = rng.choice(("How much is {n} {a} in {b}?", "Convert {n} {a} to {b}, please.",
                    "I have {n} {a}. What is that in {b}?"))  # fmt: skip
    return Task(
        "convert_currency", q.format(n=amount, a=a, b=b),
        {"amount": amount, "from_currency": a, "to_currency": b},
        f"The user wants {amount} {a} converted to {b}. The convert_currency tool does that: "
        f"amount {amount}, from_currency {a}, to_currency {b}.",
        {"amount": amount, "from": a, "to": b, "rate": rate, "converted": converted},
        f"The tool gives a rate of {rate}, so {amount} {a} is {converted:.2f} {b}.",
        f"{amount} {a} is {converted:.2f} {b} at today's rate of {rate}.",
        f"{converted:.2f}",
    )  # fmt: skip


def stock(rng: random.Random) -> Task:
    sym = rng.choice(SYMBOLS)
    price = round(rng.uniform(10, 900), 2)
    q = rng.choice(("What is {s} trading at?", "Get me the current price of {s} stock.",
                    "How much does one share of {s} cost right now?"))  # fmt: skip
    return Task(
        "get_stock_price", q.format(s=sym), {"symbol": sym},
        f"The user wants the price of {sym}. I'll call get_stock_price with symbol {sym}.",
        {"symbol": sym, "price": price, "currency": "USD"},
        f"The tool says {sym} is at {price:.2f} USD.",
        f"{sym} is trading at ${price:.2f}.",
        f"{price:.2f}",
    )  # fmt: skip


def local_time(rng: random.Random) -> Task:
    city = rng.choice(sorted(ZONES))
    zone, hh, mm = ZONES[city], rng.randint(0, 23), rng.randint(0, 59)
    q = rng.choice(("What time is it in {c}?", "Tell me the local time in {c}.",
                    "What's the time right now in {c}?"))  # fmt: skip
    return Task(
        "get_local_time", q.format(c=city), {"timezone": zone},
        f"The user wants the time in {city}, whose time zone is {zone}. I'll call "
        f"get_local_time with timezone {zone}.",
        {"timezone": zone, "time": f"{hh:02d}:{mm:02d}"},
        f"The tool says it is {hh:02d}:{mm:02d} in {zone}.",
        f"It is {hh:02d}:{mm:02d} in {city} right now.",
        f"{hh:02d}:{mm:02d}",
    )  # fmt: skip


TASKS: dict[str, Callable[[random.Random], Task]] = {
    "get_weather": weather, "calculate": calculator, "convert_currency": currency,
    "get_stock_price": stock, "get_local_time": local_time,
}  # fmt: skip
KINDS = (("call", 0.45), ("answer", 0.4), ("plain", 0.15))


@dataclass(frozen=True, slots=True)
class ToolExample:
    kind: str  # call | answer | plain
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    completion: str  # what the assistant writes (its end-of-turn token not included)
    task: Task | None = None
    gold: str = ""  # what a right final answer says (plain: its \\boxed answer)


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """A call as the chat template renders and the hermes parser reads it."""
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<tool_call>\n{body}\n</tool_call>"


def prompt_ids(hf_tokenizer: Any, ex: ToolExample, chat_template: str | None = None) -> list[int]:
    """The example's chat, tools and all, rendered for the assistant's turn (by the tokenizer's
    own template unless `chat_template` is given) and tokenized."""
    text = hf_tokenizer.apply_chat_template(ex.messages, tools=ex.tools, tokenize=False,
                                            add_generation_prompt=True,
                                            chat_template=chat_template)  # fmt: skip
    return hf_tokenizer.encode(text, add_special_tokens=False)


def offered(rng: random.Random, need: str | None) -> list[dict[str, Any]]:
    """One to three tools in random order, `need` among them."""
    others = [n for n in TOOLS if n != need]
    names = rng.sample(others, rng.randint(0 if need else 1, 2)) + ([need] if need else [])
    rng.shuffle(names)
    return [TOOLS[n] for n in names]


def tool_example(seed: int, index: int, kind: str | None = None) -> ToolExample:
    """The `index`-th example of `seed` (its kind drawn unless given)."""
    rng = random.Random(f"tools:{seed}:{index}")
    kind = kind or rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    if kind == "plain":
        family = rng.choice(("word", "story", "linear", "arith"))
        i = rng.randrange(10**9)
        p = make_problem(family, 7_000_011 + seed, i)
        while split_of(p.question) != "train":
            i += 1
            p = make_problem(family, 7_000_011 + seed, i)
        tools = offered(rng, None)
        # A calculator would fit an arithmetic problem: offered tools here never do.
        tools = [t for t in tools if t["function"]["name"] != "calculate"] or [TOOLS["get_weather"]]
        user = [{"role": "user", "content": " ".join(p.question.split())}]
        trace = r1_trace(p, seed=i, post_answer=0.2).text
        return ToolExample(kind, user, tools, trace, gold=f"\\boxed{{{p.answer}}}")
    task = TASKS[rng.choice(sorted(TASKS))](rng)
    tools = offered(rng, task.tool)
    user = [{"role": "user", "content": task.question}]
    if kind == "call":
        completion = f"<think>\n{task.why}\n</think>\n\n{call_text(task.tool, task.arguments)}"
        return ToolExample(kind, user, tools, completion, task, task.gold)
    call = {"id": f"call_{rng.randrange(16**8):08x}", "type": "function",
            "function": {"name": task.tool, "arguments": json.dumps(task.arguments)}}  # fmt: skip
    turns = [
        *user,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(task.result)},
    ]
    completion = f"<think>\n{task.reading}\n</think>\n\n{task.answer}"
    return ToolExample(kind, turns, tools, completion, task, task.gold)
