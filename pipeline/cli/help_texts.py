"""The longer help texts of `stepwise`'s subcommands (parser.py uses them)."""

VERIFY_DESCRIPTION = """`stepwise verify`: check reasoning traces offline, from any model or server.

Input: JSONL (a file, or `-` for stdin), one trace per line:

    {"id": "t1", "problem": "What is 12 * 7?", "steps": ["12 * 7 = 10 * 7 + 2 * 7", "= 84"]}
    {"id": "t2", "problem": "...", "text": "<think>\\n...\\n</think>\\n\\nThe answer is 5.",
     "format": "deepseek_r1"}

Optional: `premises` (relations the verifier may assume), `format` (how `text` splits into
steps: a reasoning format's name, see docs/reasoning-formats.md; default: paragraphs when the
text has blank lines, else lines). Each step is checked after the ones before it (a
contradicted step is not kept as known). Output: one JSON line per trace, in input order:

    {"id": "t1", "verdicts": [{"verdict": "entailed", "reason": "", "detail": "",
      "claims": [{"text": "12 * 7 = 10 * 7 + 2 * 7", "span": [0, 23], "verdict": "entailed",
                  "reason": ""}]}, ...], "coverage": {...}}

A bad line gets `{"id": ..., "line": N, "error": "..."}` and the rest go on. Exit code 0
unless the input cannot be read.
"""

VERIFY_EPILOG = """example:
  $ cat traces.jsonl
  {"id": "a", "problem": "What is 12 * 7?", "steps": ["So 12 × 7 = 86.", "The answer is 86."]}
  $ stepwise verify traces.jsonl
  {"id": "a", "verdicts": [{"verdict": "contradicted", "reason": "", "detail": "12 × 7 = 86 is
   false", "claims": [{"text": "12 × 7 = 86", "span": [3, 14], "verdict": "contradicted",
   "reason": ""}]}, ...], "coverage": {...}}

verdicts: entailed (implied by the problem, premises and earlier steps), contradicted
(refuted), consistent (neither), no_claim (nothing checkable), unknown (unreadable piece,
limit or solver timeout; `reason` says which), ungrounded (not refuted, but computes with a
number found nowhere in the problem or the earlier steps). Each claim says how it was checked
(`kind`: arithmetic, identity, equation, solution, binding, quote). docs/verification.md says more.
"""
