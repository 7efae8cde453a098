"""Claims read the moment they are written: wrong arithmetic repaired in place, or rolled back.

After every engine step the driver asks `ClaimWatch.scan` to read the sequence's unreported
text (its completed steps not yet reported, and the step being written). When the expression
after the text's last `=` has just been closed (pipeline/verify/repair.py), the text is read
for a claim with no unknowns whose value its left side refutes. Then:

* verify mode `repair`: the sequence is rolled back to the wrong value's first token (the
  value after the `=`, or the one slipped number of an expression there: `27 * 5 * 10 = 145 *
  10`), the right value's tokens are put in, and sampling goes on after them. Only the wrong
  value and what was sampled after it (usually a token or two) are discarded. A repair that
  would change any character before the value (a re-tokenization that does not give back the
  same text) is refused: the value stays, and is rolled back as below. A left side's slipped
  coefficient (`9x = 22 + 3` -> `5x = 22 + 3`, read once the right side is closed) is put
  right with the claim's text after it put back as the model wrote it; in the step being
  written only (a completed step's is its verdict's).
* otherwise (and for a value no repair can write: `7 / 3 = 2`): a false claim in the step being
  written is handed back (`FalseClaim`) and the driver rolls the sequence back to the claim's
  start right away, mid-step, before the rest of the step and the tokens a verdict's round trip
  would cost are decoded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from pipeline.engine.sequence import Sequence
from pipeline.toolcalls import before_calls
from pipeline.verify.found_claim import FoundClaim
from pipeline.verify.repair import Repair, closed_at, closed_false_claim, find_repair

_VALUE = re.compile(r"\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True, slots=True)
class RepairMark:
    """One repair made: where its tokens begin, its step, the value old and new."""

    position: int  # token position the repaired text's tokens begin at
    step: int
    prefix: str  # text put in again before the value (the first token's part before it)
    old: str
    new: str
    claim: str  # the claim as the model wrote it


@dataclass(frozen=True, slots=True)
class FalseClaim:
    """A false claim just closed in the step being written (not yet a step of the chain)."""

    step: int
    start: int  # token position where the step begins
    text: str  # the step's text so far, as the decode gave it
    claim: FoundClaim  # span: characters of `text`


def token_at(decode, ids: list[int], start: int, char: int, text: str) -> int | None:
    """The last token position p in [start, len(ids)] whose text from `start` is a prefix of
    `text` no longer than `char` characters (None when the tokens do not give `text` back)."""
    best = None
    for p in range(start, len(ids) + 1):
        kept = decode(ids[start:p])
        if len(kept) > char:
            break
        if text.startswith(kept):
            best = p
    return best


class ClaimWatch:
    """The claims of one sequence as they are written (the driver calls `scan` after each
    engine step): repaired when `repair`, else the first false one handed back."""

    def __init__(
        self,
        engine,
        seq: Sequence,
        max_repairs: int,
        repair: bool = True,
        values: Mapping[str, Fraction] | None = None,
    ) -> None:
        self.engine, self.seq, self.max_repairs = engine, seq, max_repairs
        self.repair = repair
        # What the problem's equations fix (repair.problem_values): a wrong value of them is
        # repaired, and a false claim on them alone rolled back, like arithmetic.
        self.values = values
        self.marks: list[RepairMark] = []
        self.num_refused = 0
        # (segment start, where its closed expression ends, final) already read: each once.
        self._judged: set[tuple[int, int, bool]] = set()

    def scan(self, first: int, first_step: int) -> tuple[RepairMark, int] | FalseClaim | None:
        """Read the text from token `first` (where step `first_step` begins) to the end; make
        the first repair it needs (returns the repair and the tokens put in), or hand back a
        false claim closed in the step being written; None when there is neither."""
        seq = self.seq
        ids = seq.token_ids
        bounds = [e for e in seq.step_ends if e > first]
        if not bounds or bounds[-1] < seq.num_tokens:
            bounds.append(seq.num_tokens)
        start = first
        for index, end in enumerate(bounds, start=first_step):
            final = end != seq.num_tokens or seq.pending_finish is not None or end in seq.step_ends
            seg, start = (start, end), end
            if final and not self._repairing:
                continue  # a completed step's false claims are its fast verdict's: not read
            text = self.engine.tokenizer.decode(ids[seg[0] : seg[1]])
            cut = before_calls(text)  # a tool call opened: read what precedes it, no further
            found = self._read(seg[0], cut, final, index)
            if found is not None or cut != text:
                return found
        return None

    def _read(
        self, start: int, text: str, final: bool, index: int
    ) -> tuple[RepairMark, int] | FalseClaim | None:
        if not self._worth_reading(start, text, final):
            return None
        repair = find_repair(text, final=final, values=self.values) if self._repairing else None
        if repair is not None and (made := self._make(start, text, repair, index, final)):
            return made
        # A completed step's false claims are its verdict's (the driver's fast verdict);
        # one in the step being written is rolled back now.
        if not final and (claim := closed_false_claim(text, values=self.values)) is not None:
            return FalseClaim(index, start, text, claim)
        return None

    @property
    def _repairing(self) -> bool:
        return self.repair and len(self.marks) < self.max_repairs

    def _worth_reading(self, start: int, text: str, final: bool) -> bool:
        """An expression after the text's last `=` that was just closed (its last number
        followed by something that cannot continue it, or by another `=`), or a step just
        completed; each read once."""
        eq = text.rfind("=")
        if eq < 0:
            return False
        if final:
            at = -1
        elif (tail := text.rstrip()).endswith("="):  # `= 145 * 10 =`: the one before closed
            at = len(tail)
        else:
            last = max(_VALUE.finditer(text, eq + 1), key=lambda m: m.end(), default=None)
            if last is None or not closed_at(text, last.end()):
                return False
            at = last.end()
        key = (start, at, final)
        if key in self._judged:
            return False
        self._judged.add(key)
        return True

    def _make(
        self, start: int, text: str, repair: Repair, step: int, final: bool
    ) -> tuple[RepairMark, int] | None:
        seq, engine, tok = self.seq, self.engine, self.engine.tokenizer
        if repair.keeps_rest and (
            final or tok.decode(seq.token_ids[start : seq.num_tokens]) != text
        ):  # the text to put back must be all that follows (no step's end, no tool call)
            return None
        if seq.guide is not None and seq.guide.active:  # a grammar holds the text: no rewrite
            self.num_refused += 1
            return None
        a = repair.span[0]
        p = token_at(tok.decode, seq.token_ids[: seq.num_tokens], start, a, text)
        if p is None:
            self.num_refused += 1
            return None
        kept = tok.decode(seq.token_ids[start:p])
        prefix = text[len(kept) : a]
        rest = text[repair.span[1] :] if repair.keeps_rest else ""
        new_ids = tok.encode(prefix + repair.new + rest, add_special_tokens=False)
        # The text before the value (and the text kept after it) must come back character
        # for character.
        if tok.decode(seq.token_ids[start:p] + new_ids) != text[:a] + repair.new + rest:
            self.num_refused += 1
            return None
        if p + len(new_ids) + 8 >= engine.max_model_len:
            return None
        engine.rollback(seq.request_id, p)
        engine.append_tokens(seq.request_id, new_ids)
        mark = RepairMark(p, step, prefix, repair.old, repair.new, repair.claim)
        self.marks.append(mark)
        return mark, len(new_ids)

    def rolled_back(self, position: int) -> None:
        """The sequence was cut to `position`: repairs from there on are gone with it."""
        self.marks = [m for m in self.marks if m.position < position]
        self._judged.clear()

    def spans(self, decode, output: list[int], prompt_len: int) -> list[tuple[RepairMark, int]]:
        """Each kept repair with the character offset of its new value in the output text."""
        text = decode(output)
        out = []
        for m in self.marks:
            at = len(decode(output[: m.position - prompt_len])) + len(m.prefix)
            if text[at : at + len(m.new)] != m.new:  # a decode that merged across the cut
                found = text.find(m.new, max(0, at - 8))
                at = found if found >= 0 else at
            out.append((m, at))
        return out
