"""Llama 3.x JSON: `{"name": ..., "parameters": {...}}` (or `arguments`), optionally after
`<|python_tag|>`, several separated by `;` or newlines. As vLLM's `llama3_json`: the prose
around the calls is dropped when there is a call; without one the whole text is content."""

from __future__ import annotations

import json

from pipeline.toolcalls.base import Extracted, ToolParser, call_from_object

TAG = "<|python_tag|>"


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
            call = call_from_object(value, ("parameters", "arguments"))
            if call is not None:
                calls.append(call)
                i = end  # what a call holds is not another call
            else:
                i += 1
        return Extracted(None, calls) if calls else Extracted(text)
