"""Named quantities inside expressions: `9 = (3/4)*number of novels she wrote this year`,
`40 + time on the bus + 60 = 160`, `total = price * 3`.

A run of words in an operand's place — right after a binary operator whose left operand was
read, or between a relation (or an opening parenthesis) and a binary operator — is a quantity
the step names without giving its value: an unknown. It becomes one VAR token whose `math` is a
placeholder letter and whose `name` is its words, so the relation is read whole (an equation in
that unknown) instead of being cut to `9 = (3/4)`. Such an unknown belongs to its step: the
checker never carries it into later steps (the same words later may mean another amount).
"""

from __future__ import annotations

from pipeline.verify.prose_tokens import BREAK, LP, NUM, OP, REL, RP, VAR, WORD, Token
from pipeline.verify.prose_units import FUNCTION_WORDS

MAX_NAME_WORDS = 8  # past this a run of words is prose, not a quantity's name
# Words a name may start with although they join sentences ("the number of cats").
_NAME_STARTS = frozenset({"the", "each", "one"})
_NOT_FIRST = FUNCTION_WORDS - _NAME_STARTS
_BINARY = frozenset("+-*/")
# Placeholders: capitals models rarely use as variables; a step's own letters are skipped.
_PLACEHOLDERS = "QWJKVZUGHFDRSTLMPOEYXNCBAI"


def named_quantities(tokens: list[Token]) -> list[Token]:
    """Word runs in an operand's place become named VAR tokens (see the module docstring)."""
    if not any(t.kind == OP and t.math in _BINARY for t in tokens):
        return tokens
    out: list[Token] = []
    letters: dict[str, str] = {}  # name -> placeholder
    used = {t.math for t in tokens if t.kind == VAR}
    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        if t.kind == WORD and t.math.lower() not in _NOT_FIRST:
            j = i + 1
            while j < n and tokens[j].kind in (WORD, VAR) and j - i < MAX_NAME_WORDS + 1:
                j += 1  # "Class C": a letter may name too, after a word
            follow = tokens[j] if j < n else None
            if j - i <= MAX_NAME_WORDS and _operand_place(out, follow):
                name = " ".join(w.math.lower() for w in tokens[i:j])
                letter = letters.get(name) or _placeholder(used)
                if letter is not None:
                    letters[name] = letter
                    used.add(letter)
                    out.append(Token(VAR, letter, t.start, tokens[j - 1].end, name=name))
                    i = j
                    continue
        out.append(t)
        i += 1
    return out


def _operand_place(out: list[Token], follow: Token | None) -> bool:
    prev = out[-1] if out else None
    if prev is not None and prev.kind == OP and prev.math in _BINARY:
        # "(3/4)*number of novels": the left operand was read, the name ends the operand
        before = out[-2] if len(out) > 1 else None
        ends_operand = before is not None and (
            before.kind in (NUM, RP, VAR) or (before.kind == OP and before.math == "%")
        )
        return ends_operand and (follow is None or follow.kind != NUM)
    if (prev is None or prev.kind in (REL, LP, BREAK)) and follow is not None:
        # "= price * 3", "means: number of pages*(2/3) = 96": a name, an operator, an operand
        return follow.kind == OP and follow.math in _BINARY
    return False


def _placeholder(used: set[str]) -> str | None:
    return next((c for c in _PLACEHOLDERS if c not in used), None)
