"""Llama 3.x JSON: `{"name": ..., "parameters": {...}}` (or `arguments`), optionally after
`<|python_tag|>`, several separated by `;` or newlines. As vLLM's `llama3_json`: the prose
around the calls is dropped when there is a call; without one the whole text is content."""

from __future__ import annotations

import json

from pipeline.toolcalls.base import (
    Extracted,
    PartialCall,
    ToolParser,
    call_from_object,
    partial_json_call,
)

TAG = "<|python_tag|>"
ARGUMENT_KEYS = ("parameters", "arguments")


class Llama3JsonParser(ToolParser):
    name = "llama3_json"
    aliases = ("llama4_json",)
    openers = (TAG, "{")
    call_marks = (TAG,)

    def extract(self, text: str) -> Extracted:
        decoder, calls, i = json.JSONDecoder(), [], 0
        while (i := text.find("{", i)) >= 0:
            try:
                value, end = decoder.raw_decode(text, i)
            except json.JSONDecodeError:
                i += 1
                continue
            call = call_from_object(value, ARGUMENT_KEYS)
            if call is not None:
                calls.append(call)
                i = end  # what a call holds is not another call
            else:
                i += 1
        return Extracted(None, calls) if calls else Extracted(text)

    def partial(self, tail: str) -> PartialCall | None:
        # every call is finished only at the output's end: the first one streams, any others
        # come whole then
        return partial_json_call(tail, ARGUMENT_KEYS)
