"""Verify mode `repair` on one sequence: a wrong arithmetic value is replaced in place.

After every engine step the driver asks `Repairer.scan` to read the sequence's unreported text
(its completed steps not yet reported, and the step being written). When the value after the
text's last `=` has just been closed (pipeline/verify/repair.py), the text is read for a claim
with no unknowns whose value its left side refutes; the sequence is then rolled back to that
value's first token, the right value's tokens are put in, and sampling goes on after them. Only
the wrong value and what was sampled after it (usually a token or two) are discarded.

A repair that would change any character before the value (a re-tokenization that does not give
back the same text) is refused: the value stays, and the checker's verdict rolls it back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.engine.sequence import Sequence
from pipeline.verify.repair import Repair, closed_at, find_repair

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


class Repairer:
    """The repairs of one sequence (the driver calls `scan` after each engine step)."""

    def __init__(self, engine, seq: Sequence, max_repairs: int) -> None:
        self.engine, self.seq, self.max_repairs = engine, seq, max_repairs
        self.marks: list[RepairMark] = []
        self.num_refused = 0
        # (segment start, index of its last `=`, final) already read: read each value once.
        self._judged: set[tuple[int, int, bool]] = set()

    def scan(self, first: int, first_step: int) -> tuple[RepairMark, int] | None:
        """Read the text from token `first` (where step `first_step` begins) to the end; make
        the first repair it needs. Returns (the repair, the tokens put in) or None."""
        seq = self.seq
        if len(self.marks) >= self.max_repairs:
            return None
        ids = seq.token_ids
        bounds = [e for e in seq.step_ends if e > first]
        if not bounds or bounds[-1] < seq.num_tokens:
            bounds.append(seq.num_tokens)
        start = first
        for index, end in enumerate(bounds, start=first_step):
            final = end != seq.num_tokens or seq.pending_finish is not None or end in seq.step_ends
            seg, start = (start, end), end
            text = self.engine.tokenizer.decode(ids[seg[0] : seg[1]])
            if not self._worth_reading(seg[0], text, final):
                continue
            repair = find_repair(text, final=final)
            if repair is not None and (made := self._make(seg[0], text, repair, index)):
                return made
        return None

    def _worth_reading(self, start: int, text: str, final: bool) -> bool:
        """A value after the last `=` that was just closed (or a step just completed), not
        read before."""
        eq = text.rfind("=")
        if eq < 0:
            return False
        key = (start, eq, final)
        if key in self._judged:
            return False
        if not final:
            value = _VALUE.search(text, eq + 1)
            if value is None or not closed_at(text, value.end()):
                return False
        self._judged.add(key)
        return True

    def _make(
        self, start: int, text: str, repair: Repair, step: int
    ) -> tuple[RepairMark, int] | None:
        seq, engine, tok = self.seq, self.engine, self.engine.tokenizer
        a = repair.span[0]
        p = token_at(tok.decode, seq.token_ids[: seq.num_tokens], start, a, text)
        if p is None:
            self.num_refused += 1
            return None
        kept = tok.decode(seq.token_ids[start:p])
        prefix = text[len(kept) : a]
        new_ids = tok.encode(prefix + repair.new, add_special_tokens=False)
        # The text before the value must come back character for character.
        if tok.decode(seq.token_ids[start:p] + new_ids) != text[:a] + repair.new:
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
