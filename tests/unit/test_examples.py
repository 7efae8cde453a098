"""examples/tool_agent.py's own tools (pure): an exact calculator that evaluates arithmetic and
nothing else, and a tool error handed back to the model as the tool's result, not raised."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tool_agent.py"
spec = importlib.util.spec_from_file_location("tool_agent", EXAMPLE)
agent = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agent)


def test_the_calculator_is_exact_and_reads_only_arithmetic():
    assert agent.calculate("37 * 48 + 12") == {"result": 1788}
    assert agent.calculate("-(3 - 10) / 2") == {"result": 3.5}
    got = json.loads(agent.run_tool("calculate", json.dumps({"expression": "__import__('os')"})))
    assert got["error"].startswith("ValueError")


def test_a_bad_call_is_a_tool_error_the_model_reads():
    for name, args in (("calculate", '{"celsius": 30}'), ("nope", "{}"), ("get_weather", "{")):
        assert "error" in json.loads(agent.run_tool(name, args))
    ok = json.loads(agent.run_tool("get_weather", '{"location": "Oslo", "unit": "celsius"}'))
    assert ok["location"] == "Oslo" and ok["unit"] == "celsius"
    assert {t["function"]["name"] for t in agent.TOOLS} == {"get_weather", "calculate"}
