"""A reasoning model that thinks, calls a tool, reads its result and answers: the `openai`
client's documented tool loop, unchanged, against `stepwise up` (the R1-style reasoner, trained
on tool-use traces: pipeline/assets/r1-lora/MODEL_CARD.md).

    stepwise up &                      # http://127.0.0.1:8000 (the demo's model)
    python examples/tool_agent.py "What's the weather like in Oslo? Use celsius."
    python examples/tool_agent.py "Use the calculator: what is 37 * 48 + 12?" --stream

The tools run here, in this script (a weather and a clock stand-in, an exact calculator); each
turn's thinking (`reasoning_content`), call and answer are printed as they come.
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import sys

import openai

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location", "unit"]}}},
    {"type": "function", "function": {
        "name": "calculate", "description": "Evaluate an arithmetic expression exactly.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string", "description": "The expression, e.g. 3 * (4 + 5)"}},
            "required": ["expression"]}}},
]  # fmt: skip
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
       ast.Div: operator.truediv, ast.USub: operator.neg}  # fmt: skip


def calculate(expression: str) -> dict:
    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPS:
            return OPS[type(node.op)](ev(node.operand))
        raise ValueError(f"not arithmetic: {expression!r}")

    value = ev(ast.parse(expression, mode="eval").body)
    return {"result": int(value) if float(value).is_integer() else value}


def get_weather(location: str, unit: str = "celsius") -> dict:  # a stand-in: no network here
    return {"location": location, "temperature": 14 if unit == "celsius" else 57, "unit": unit,
            "condition": "cloudy"}  # fmt: skip


def run_tool(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments)
        result = {"calculate": calculate, "get_weather": get_weather}[name](**args)
    except (KeyError, TypeError, ValueError, SyntaxError) as e:
        result = {"error": f"{type(e).__name__}: {e}"}
    return json.dumps(result)


def turn(client: openai.OpenAI, messages: list, stream: bool, temperature: float) -> dict:
    """One assistant turn, printed as it comes: its thinking, content and calls."""
    kw = dict(model="r1-reasoner", messages=messages, tools=TOOLS, max_completion_tokens=600,
              temperature=temperature)  # fmt: skip
    if not stream:
        m = client.chat.completions.create(**kw).choices[0].message
        print(f"[thinking] {getattr(m, 'reasoning_content', None) or ''}".strip())
        calls = [c.model_dump() for c in m.tool_calls or []]
        print(f"[answer] {m.content or ''}".strip())
        return {"role": "assistant", "content": m.content, "tool_calls": calls or None}
    content, calls, channel = "", {}, None
    for chunk in client.chat.completions.create(**kw, stream=True):
        for choice in chunk.choices:
            d = choice.delta
            for name, text in (("thinking", getattr(d, "reasoning_content", None)),
                               ("answer", d.content)):  # fmt: skip
                if text:
                    if channel != name:
                        print(f"\n[{name}] ", end="")
                        channel = name
                    print(text, end="", flush=True)
                    content += text if name == "answer" else ""
            for t in d.tool_calls or ():
                fresh = {"id": t.id, "type": "function", "function": {"name": "", "arguments": ""}}
                call = calls.setdefault(t.index, fresh)
                call["function"]["name"] += t.function.name or ""
                call["function"]["arguments"] += t.function.arguments or ""
    print()
    return {"role": "assistant", "content": content or None,
            "tool_calls": list(calls.values()) or None}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("question")
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--api-key", default="none", help="a key, where the gateway asks for one")
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy, as agents run")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key)
    messages: list = [{"role": "user", "content": args.question}]
    for _ in range(args.max_turns):
        reply = turn(client, messages, args.stream, args.temperature)
        if not reply["tool_calls"]:
            return 0
        messages.append({k: v for k, v in reply.items() if v is not None or k == "content"})
        for call in reply["tool_calls"]:
            f = call["function"]
            result = run_tool(f["name"], f["arguments"])
            print(f"[tool] {f['name']}({f['arguments']}) -> {result}")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    print(f"no answer after {args.max_turns} turns", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
