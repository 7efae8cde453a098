"""IBM Granite 3.2/3.3 thinking: phrase markers, not tokens.

The model writes "Here is my thought process:" (or "Here's …") before its thinking and "Here is
my response:" before the answer (vLLM's `granite`). Without the first phrase it is all content;
a response phrase with no thought phrase before it is text.
"""

from __future__ import annotations

from pipeline.formats.registry import register_format
from pipeline.formats.think_tags import ThinkTagFormat


@register_format("granite")
class GraniteFormat(ThinkTagFormat):
    think_start, think_end = "Here is my thought process:", "Here is my response:"
    more_think_starts = ("Here's my thought process:",)
    more_think_ends = ("Here's my response:",)
    starts_in_thinking = False
    force_close = "\n\nHere is my response:\n\n"
    # Granite's template asks for thinking with these phrases in its system prompt.
    signature = ("Here is my thought process:", "Here is my response:")
    detect_priority = 5
