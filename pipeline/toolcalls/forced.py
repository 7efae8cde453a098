"""tool_choice `required` or a named function, as vLLM forces it: a grammar makes the content
a JSON list of calls, `[{"name": ..., "parameters": {...}}]`, each call's parameters held to its
tool's schema (one call when parallel calls are off, or a function is named)."""

from __future__ import annotations

from typing import Any


def forced_schema(tools: list[Any], choice: str, parallel: bool) -> dict[str, Any]:
    """The JSON schema of the forced list; `tools` are schema.Tool (or their dicts' shape)."""
    chosen = [t for t in tools if choice == "required" or t.function.name == choice]
    items = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t.function.name},
                "parameters": t.function.parameters or {"type": "object"},
            },
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for t in chosen
    ]
    one = parallel and choice == "required"
    return {
        "type": "array",
        "items": items[0] if len(items) == 1 else {"anyOf": items},
        "minItems": 1,
        **({} if one else {"maxItems": 1}),
    }
