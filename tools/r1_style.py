"""R1-style reasoning traces from the task generators' gold solutions (issue 21's training data).

A trace is what an R1-style model writes: `<think>`, paragraphs of natural-language reasoning
with the arithmetic inline (sentences, some LaTeX, some list steps), self-checks ("Wait, let
me double-check: …"), and often thinking that goes on after the answer is reached (a
re-derivation, "Hmm, let me verify once more"), then `</think>` and `The answer is \\boxed{N}.`
Every relation in a trace is one of the gold solution's true steps or checks, rewritten: the
model's mistakes must be its own, not taught (a property test checks every trace with the
verifier). `post_answer` is the knob for the share of traces that keep thinking after the
answer; what they add is recorded (`Trace.answer_at`) so the redundant part can be measured
from the traces themselves.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from pipeline.evals.problems import CHECK_PREFIX, Problem

OPENERS = (
    "Okay, so I need to work this out: {q}",
    "Let me think about this. {q}",
    "Alright, the problem says: {q}",
    "Okay, let's see. {q}",
)
FIRST_LEADS = ("First, ", "", "Let me start: ", "To begin, ")
LEADS = ("So ", "Then ", "Next, ", "That gives ", "Now ", "", "Which means ", "After that, ")
CHECK_LEADS = (
    "Wait, let me double-check: {c}.",
    "Let me verify that: {c}.",
    "Hmm, checking: {c}. Yes.",
    "Quick check: {c}, good.",
)
AGAIN = (
    "Hmm, let me verify once more.",
    "Wait, let me make sure by going through it again.",
    "Let me re-derive it to be safe.",
    "Actually, let me double-check the whole thing.",
)
ANSWER_SAID = ("So the answer is {a}.", "That means the answer is {a}.", "So it's {a}.")


@dataclass(frozen=True, slots=True)
class Trace:
    problem: Problem
    text: str  # the completion: "<think>\n...</think>\n\nThe answer is \\boxed{...}."
    answer_at: int  # character offset where the answer is first stated in the thinking
    post_answer_chars: int  # thinking after that point (the part a good early exit removes)


def latex(line: str) -> str:
    """A gold equation line in LaTeX: `*` as `\\times`, `/` as `\\div` (exact either way)."""
    return line.replace("*", "\\times").replace("/", "\\div")


def _sentence(rng: random.Random, line: str, first: bool = False) -> str:
    lead = rng.choice(FIRST_LEADS if first else LEADS)
    style = rng.random()
    if style < 0.25:
        return f"{lead}${latex(line)}$."
    if style < 0.35:
        return f"{lead}\\({latex(line)}\\)."
    return f"{lead}{line.replace('*', '×') if rng.random() < 0.3 else line}."


def _steps_paragraphs(rng: random.Random, lines: list[str]) -> list[str]:
    """The gold lines as paragraphs of one or two sentences, or now and then as a list."""
    if len(lines) >= 3 and rng.random() < 0.2:
        return ["Step by step:\n" + "\n".join(f"- {ln}" for ln in lines)]
    paras, i = [], 0
    while i < len(lines):
        take = 2 if rng.random() < 0.4 and i + 1 < len(lines) else 1
        paras.append(
            " ".join(_sentence(rng, ln, i + k == 0) for k, ln in enumerate(lines[i : i + take]))
        )
        i += take
    return paras


def _answer_value(answer: str) -> str:
    return answer.strip()


def r1_trace(problem: Problem, seed: int, post_answer: float = 0.6) -> Trace:
    """The R1-style completion of one problem; a pure function of (problem, seed)."""
    rng = random.Random(f"r1:{problem.family}:{problem.seed}:{problem.index}:{seed}")
    gold = [s for s in problem.steps if not s.startswith(CHECK_PREFIX)]
    checks = [s[len(CHECK_PREFIX) :] for s in problem.steps if s.startswith(CHECK_PREFIX)]
    answer = _answer_value(problem.answer)
    paras = [rng.choice(OPENERS).format(q=" ".join(problem.question.split()))]
    paras += _steps_paragraphs(rng, gold)
    if checks:
        paras.append(rng.choice(CHECK_LEADS).format(c=checks[0]))
    paras.append(rng.choice(ANSWER_SAID).format(a=answer))
    thinking = "\n\n".join(paras)
    answer_at = len("<think>\n") + len(thinking)
    if rng.random() < post_answer:  # R1-style: it keeps thinking after it has the answer
        again = [rng.choice(AGAIN), *_steps_paragraphs(rng, gold)]
        for c in checks[1:2]:
            again.append(rng.choice(CHECK_LEADS).format(c=c))
        again.append(f"Yes, {answer} is right.")
        thinking += "\n\n" + "\n\n".join(again)
    post = len("<think>\n") + len(thinking) - answer_at
    boxed = re.sub(r"\s+", " ", answer)
    text = f"<think>\n{thinking}\n</think>\n\nThe answer is \\boxed{{{boxed}}}."
    return Trace(problem, text, answer_at, post)
