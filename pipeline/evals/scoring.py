"""Scoring a reasoning trace: well-formed steps, arithmetically right equations, the answer.

A step is one non-empty line. It is well-formed when it is one of (docs/step-format.md):
  * an equation chain `a = b = c` (also `<`, `>`, `<=`, `>=`), every side in the grammar of
    pipeline.evals.exprs, optionally after `Check: `;
  * a line with GSM8K calculator annotations `<<expr=value>>`;
  * the final `Answer: <value>` (a number, or `x = 4, y = 7`).
An equation is checkable when two adjacent sides are free of variables; it is right when every
such pair holds exactly (Fraction arithmetic). Lines without a checkable pair count as no claim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from pipeline.evals.exprs import ExprError, evaluate, format_number, is_expression
from pipeline.evals.problems import ANSWER_PREFIX, CHECK_PREFIX

_RELATION = re.compile(r"(<=|>=|≤|≥|=|<|>)")
_GSM = re.compile(r"<<([^<>=]+)=([^<>=]+)>>")
_ASSIGN = re.compile(r"^\s*([A-Za-z])\s*=\s*(.+?)\s*$")


@dataclass(frozen=True, slots=True)
class Claim:
    """One chain of relations: sides[i] rel[i] sides[i+1]."""

    sides: tuple[str, ...]
    relations: tuple[str, ...]


def split_chain(text: str) -> Claim | None:
    parts = _RELATION.split(text)
    sides, relations = tuple(p.strip() for p in parts[0::2]), tuple(parts[1::2])
    if len(sides) < 2 or not all(sides) or not all(is_expression(s) for s in sides):
        return None
    return Claim(sides, relations)


def claims_in_line(line: str) -> list[Claim] | None:
    """The claims of one step line; None when the line is not a well-formed claim line."""
    text = line.strip()
    if text.startswith(CHECK_PREFIX):
        text = text[len(CHECK_PREFIX) :]
    gsm = _GSM.findall(text)
    if gsm:
        claims = [split_chain(f"{lhs} = {rhs}") for lhs, rhs in gsm]
        return None if any(c is None for c in claims) else claims
    chain = split_chain(text)
    return None if chain is None else [chain]


def _holds(lhs: Fraction, rel: str, rhs: Fraction) -> bool:
    return {
        "=": lhs == rhs,
        "<": lhs < rhs,
        ">": lhs > rhs,
        "<=": lhs <= rhs,
        "≤": lhs <= rhs,
        ">=": lhs >= rhs,
        "≥": lhs >= rhs,
    }[rel]


def check_claim(claim: Claim, env: dict[str, Fraction] | None = None) -> bool | None:
    """True if every checkable adjacent pair holds, False if one fails, None if none can be."""
    values: list[Fraction | None] = []
    for side in claim.sides:
        try:
            values.append(evaluate(side, env))
        except ZeroDivisionError:
            return False
    verdict: bool | None = None
    for rel, lhs, rhs in zip(claim.relations, values[:-1], values[1:], strict=True):
        if lhs is None or rhs is None:
            continue
        if not _holds(lhs, rel, rhs):
            return False
        verdict = True
    return verdict


def parse_answer(text: str) -> Fraction | dict[str, Fraction] | str:
    """`12`, `7/2`, `-0.5`, `x = 4, y = 7` -> a Fraction or {var: Fraction}; else the raw text."""
    text = text.strip().rstrip(".").strip()
    try:
        value = evaluate(
            text.replace(",", "") if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text) else text
        )
        if value is not None:
            return value
    except (ExprError, ZeroDivisionError):
        pass
    out: dict[str, Fraction] = {}
    for part in re.split(r"[,;]|\band\b", text):
        m = _ASSIGN.match(part)
        if not m:
            return text
        try:
            value = evaluate(m.group(2))
        except (ExprError, ZeroDivisionError):
            return text
        if value is None:
            return text
        out[m.group(1)] = value
    return out or text


def answers_match(predicted: str | None, gold: str) -> bool:
    if predicted is None:
        return False
    pred, want = parse_answer(predicted), parse_answer(gold)
    if isinstance(want, Fraction) and isinstance(pred, dict) and len(pred) == 1:
        pred = next(iter(pred.values()))  # `x = 5` answers "5"
    if isinstance(pred, str) and isinstance(want, Fraction):
        # Prose answers: "$12", "12 apples", "x = 12 cards": the one number in them.
        numbers = re.findall(r"-?\d[\d,]*(?:\.\d+)?", pred.replace("$", ""))
        if len(numbers) == 1:
            pred = parse_answer(numbers[0])
    if isinstance(pred, str) or isinstance(want, str):
        return " ".join(str(predicted).split()).lower() == " ".join(gold.split()).lower()
    return pred == want


def extract_answer(completion: str) -> str | None:
    """The value of the last `Answer:` line, or None."""
    for line in reversed(completion.splitlines()):
        if line.strip().startswith(ANSWER_PREFIX.strip()):
            return line.strip()[len(ANSWER_PREFIX.strip()) :].strip()
    return None


@dataclass(frozen=True, slots=True)
class TraceScore:
    """Step- and answer-level figures of one completion."""

    num_lines: int
    num_well_formed: int
    num_steps: int  # lines before the answer
    num_equations: int  # lines with at least one checkable claim
    num_equations_right: int
    answer: str | None
    correct: bool


def score_trace(completion: str, gold_answer: str | None = None, find_answer=None) -> TraceScore:
    lines = [ln for ln in completion.splitlines() if ln.strip()]
    well_formed = equations = right = steps = 0
    for line in lines:
        text = line.strip()
        if text.startswith(ANSWER_PREFIX.strip()):
            well_formed += not isinstance(parse_answer(text[len(ANSWER_PREFIX.strip()) :]), str)
            continue
        steps += 1
        claims = claims_in_line(text)
        if claims is None:
            continue
        well_formed += 1
        verdicts = [check_claim(c) for c in claims]
        if all(v is None for v in verdicts):
            continue
        equations += 1
        right += all(v is not False for v in verdicts)
    answer = (find_answer or extract_answer)(completion)
    correct = gold_answer is not None and answers_match(answer, gold_answer)
    return TraceScore(len(lines), well_formed, steps, equations, right, answer, correct)


__all__ = [
    "Claim",
    "TraceScore",
    "answers_match",
    "check_claim",
    "claims_in_line",
    "extract_answer",
    "format_number",
    "parse_answer",
    "score_trace",
    "split_chain",
]
