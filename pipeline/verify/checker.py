"""An incremental Z3 checker: is a step's claim implied, refuted, or neither, by what came before?

State S = the premises (the job's premise strings and the relations in the problem text) plus
the claims of the accepted steps. For a step with claims C (their conjunction):

* no claims -> no_claim; a limit or unreadable text -> unknown("limit" / "unparseable");
* S unsat -> unknown("inconsistent_premises");
* S and C unsat -> contradicted; S and not C unsat -> entailed; else consistent;
* Z3 gives up -> unknown("timeout") when the deadline was hit, else unknown("solver").

Each claim is checked as what it says (unknowns.py): arithmetic (exact rationals, without
Z3), an identity (must hold for every value), an equation or a solution (against S). A
relation whose units mix scales holds if it holds as written or with its units converted.
Beside the claims, the job's numbers are grounded (grounding.py: a number found nowhere in
the problem or the earlier steps is `ungrounded`, never a contradiction) and its named
quantities bound once (bindings.py: a second value for one is contradicted, with both spans);
a restatement of the problem that changes one of its numbers or turns a word into its opposite
is contradicted (quotes.py, kind `quote`, with the problem's span).

A claim asserts that its divisions are defined: dividing by a constant zero makes it false
(contradicted, detail "division by zero"), and `a / d` with a symbolic `d` adds `d != 0` to
the claim. Variables are Reals.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from pipeline.verify import prose
from pipeline.verify.as_meant import as_meant
from pipeline.verify.bindings import Bindings
from pipeline.verify.claim_ast import expr_variables, holds
from pipeline.verify.claims import (
    DEFAULT_LIMITS,
    ClaimError,
    ClaimLimits,
    Relation,
    clear_parse_cache,
    evaluate,
    variables,
)
from pipeline.verify.grounding import Grounding
from pipeline.verify.prose import FoundClaim, extract_premises, find_claims, relations
from pipeline.verify.quotes import Quotes
from pipeline.verify.state_solver import StateSolver
from pipeline.verify.stated_units import StatedUnits
from pipeline.verify.unknowns import (
    ARITHMETIC,
    IDENTITY,
    claim_kind,
    counterexample,
    describe,
    nearly,
)
from pipeline.verify.verdicts import (
    CONSISTENT,
    CONTRADICTED,
    ENTAILED,
    INCONSISTENT_PREMISES,
    NO_CLAIM,
    SOLVER,
    TIMEOUT,
    UNGROUNDED,
    UNKNOWN,
    VERDICTS,
    ClaimVerdict,
    StepVerdict,
    _short,
    _step_verdict,
    _unread,
    number_text,
)
from pipeline.verify.z3_terms import _Undefined

__all__ = [
    "CONSISTENT", "CONTRADICTED", "ENTAILED", "INCONSISTENT_PREMISES", "NO_CLAIM", "SOLVER",
    "TIMEOUT", "UNGROUNDED", "UNKNOWN", "VERDICTS", "Checker", "ClaimVerdict", "StepVerdict",
    "check_step", "clear_cache",
]  # fmt: skip


def _named(rel: Relation) -> bool:
    """A claim about a quantity named by words (prose_names.py): its unknown is its step's."""
    return any(len(name) > 1 for name in variables([rel]))


class Checker:
    """Premises plus accepted steps, checked incrementally; one Z3 context per checker."""

    def __init__(
        self,
        premises: Iterable[str] = (),
        problem: str = "",
        *,
        limits: ClaimLimits = DEFAULT_LIMITS,
        timeout_ms: int = 200,
    ) -> None:
        self.limits = limits
        self.timeout_ms = max(1, int(timeout_ms))
        self.num_skipped_premises = 0
        self.num_accepted = 0
        premises = tuple(premises)
        rels: list[Relation] = []
        for text in premises:
            found = find_claims(text, limits)
            readable = relations(found)
            if not readable or len(readable) < len(found):
                self.num_skipped_premises += 1
            rels.extend(readable)
        rels.extend(extract_premises(problem, limits))
        self.premises: tuple[Relation, ...] = tuple(
            dict.fromkeys(rel for rel in rels if not _named(rel))
        )
        names = variables(self.premises)
        self.answer_var: str | None = next(iter(names)) if len(names) == 1 else None
        self.state = StateSolver(limits)
        self._premises_inconsistent = False
        self._init_state()
        self.grounding = Grounding(problem, premises)
        self.bindings = Bindings(problem)
        self.units = StatedUnits(problem)
        self.quotes = Quotes(problem)

    @property
    def num_dropped_claims(self) -> int:
        """Nonlinear claims with large numbers kept out of S."""
        return self.state.num_dropped_claims

    def _init_state(self) -> None:
        symbolic = []
        for rel in self.premises:
            try:
                value = self._ground_value(rel)
            except (ClaimError, _Undefined):
                value = False
            if value is False:
                self.state.sat, self._premises_inconsistent = False, True
                return
            if value is None:
                symbolic.append(rel)
        if symbolic:
            try:
                self.state.add(symbolic)
                sat = self.state.is_sat(time.monotonic() + self.timeout_ms / 1000)
            except Exception:  # noqa: BLE001 - e.g. `x / 0 = 1`: a premise that cannot hold
                sat = False
            # Undecided in time (None): later checks ask again, under their own deadline.
            self._premises_inconsistent = sat is False
            self.state.sat = sat

    # ---- public API --------------------------------------------------------------------------

    def check(self, step: str) -> StepVerdict:
        """The verdict on `step` given the premises and accepted steps; never changes state."""
        try:
            return self._check(step)
        except Exception as e:  # noqa: BLE001 - any input must give a verdict, never a crash
            return StepVerdict(UNKNOWN, SOLVER, _short(f"{type(e).__name__}: {e}"))

    def accept(self, step: str) -> None:
        """Add the step's claims with variables to the state.

        A step that yields no claims (or fails to parse) adds nothing. Claims without variables
        carry no information and are not added, so a false constant claim cannot poison the
        state; nor are identities (true for every value) or claims about a quantity named by
        words (its unknown is its step's). Accepting a claim that contradicts the state makes
        it unsat; every later check is then unknown("inconsistent_premises"). Callers should
        not accept contradicted steps.
        """
        self.num_accepted += 1
        try:
            found = find_claims(step, self.limits, self.answer_var)
            self.grounding.add(step)
            self.units.add(step, found)  # the claims read once, not again with default limits
            self.bindings.accept(step, f"step {self.num_accepted}")
            stated = [c for c in found if not c.alternative and c.relation is not None]
            symbolic = [
                c.relation for c in stated
                if variables([c.relation]) and not _named(c.relation)
                and claim_kind(c.relation, set()) != IDENTITY
            ]  # fmt: skip
            if symbolic and self.state.sat is not False:
                self.state.add(symbolic)
        except Exception:  # noqa: BLE001, S110 - an unreadable step adds nothing
            pass

    def said(self, step: str) -> None:
        """A step that stays in the text although it is not accepted (a contradicted step
        `stepwise verify` reads on past): its numbers were stated, its claims are not known."""
        self.grounding.add(step)
        self.units.said(step)

    # ---- internals ---------------------------------------------------------------------------

    def _check(self, step: str) -> StepVerdict:
        deadline = time.monotonic() + self.timeout_ms / 1000
        found = find_claims(step, self.limits, self.answer_var)
        short = len(step) <= self.limits.max_step_chars
        conflicts = self.bindings.conflicts(step) if short else []
        # A quote's changed number that a binding already reports (`One pair of pants costs
        # $16`) is said once, as the binding.
        bound = [mine.span for mine, _ in conflicts]
        misquotes = [
            m for m in (self.quotes.misquotes(step) if short else [])
            if not any(m.span[0] < b and a < m.span[1] for a, b in bound)
        ]  # fmt: skip
        if not found and not conflicts and not misquotes:
            return StepVerdict(NO_CLAIM)
        n = len(found) + len(conflicts) + len(misquotes)
        kinds = self._kinds(found)
        results: list[ClaimVerdict] = []
        context: list[Relation] = []  # the step's earlier claims with variables, not refuted
        entailed = self._all_entailed(found, kinds, deadline)
        for claim in found:
            if claim.relation is None:
                results.append(_unread(claim))
                continue
            kind = kinds[claim]
            if self._premises_inconsistent:
                verdict = StepVerdict(UNKNOWN, INCONSISTENT_PREMISES, "the premises are unsat")
            elif claim in entailed:
                verdict = StepVerdict(ENTAILED)
            else:
                given = [] if claim.alternative else context
                after = step[claim.span[1] : claim.span[1] + 80]
                verdict = self._check_claim(claim, kind, given, deadline, after)
                if (
                    claim.alternative
                    and verdict.verdict == CONTRADICTED
                    and variables([claim.relation])
                ):
                    # "x = 2 or x = 3", "check x = 7": tried, not stated; refuting one option
                    # is not refuting the step.
                    detail = _short(f"{claim.text}: an alternative the premises rule out")
                    verdict = StepVerdict(CONSISTENT, "", detail)
            v = verdict
            results.append(
                ClaimVerdict(claim.text, claim.span, v.verdict, v.reason, v.detail, kind)
            )
            known = verdict.verdict != CONTRADICTED and not claim.alternative
            if known and variables([claim.relation]) and kind != IDENTITY:
                context.append(claim.relation)
        for i, value in self.grounding.ungrounded(step, found).items():
            r = results[i]
            if r.verdict in (ENTAILED, CONSISTENT):  # a false claim stays contradicted
                detail = _short(f"{r.text}: {number_text(value)} is not in the problem or before")
                results[i] = replace(r, verdict=UNGROUNDED, detail=detail)
        for i, why in self.units.squared(step, found).items():
            r = results[i]
            if r.verdict in (ENTAILED, CONSISTENT, UNGROUNDED):  # true numbers, a wrong product
                results[i] = replace(r, verdict=CONTRADICTED, detail=_short(f"{r.text}: {why}"))
        for mine, old in conflicts:
            detail = _short(f"{mine.text!r} gives {number_text(mine.value)}; {old.source} said "
                            f"{number_text(old.value)}: {old.text!r}")  # fmt: skip
            results.append(ClaimVerdict(mine.text, mine.span, CONTRADICTED, "", detail, "binding",
                                        old.source, old.span))  # fmt: skip
        for m in misquotes:
            results.append(ClaimVerdict(m.text, m.span, CONTRADICTED, "", _short(m.detail), "quote",
                                        "the problem", m.source_span))  # fmt: skip
        results.sort(key=lambda r: r.span)
        return _step_verdict(tuple(results), n)

    def _kinds(self, found: tuple[FoundClaim, ...]) -> dict[FoundClaim, str]:
        """How each readable claim is meant (unknowns.py), given the constraints in force and
        the step's claims before it."""
        kinds: dict[FoundClaim, str] = {}
        constrained = set(self.state.constrained)
        for claim in found:
            if claim.relation is None:
                continue
            kinds[claim] = claim_kind(claim.relation, constrained)
            if not claim.alternative:
                constrained |= variables([claim.relation])
        return kinds

    def _all_entailed(
        self, found: tuple[FoundClaim, ...], kinds: dict[FoundClaim, str], deadline: float
    ) -> set[FoundClaim]:
        """The stated claims with variables, when S implies all of them at once: one pair of
        solves for the step (a right step's usual case), instead of a pair per claim.
        Identities are not among them: S may imply one that is false for other values."""
        stated = [
            c for c in found if c.relation is not None and not c.alternative
            and variables([c.relation]) and kinds[c] != IDENTITY
        ]  # fmt: skip
        if len(stated) < 2 or self._premises_inconsistent:
            return set()
        together = self.state.check([c.relation for c in stated], deadline, len(stated))
        return set(stated) if together.verdict == ENTAILED else set()

    def _check_claim(
        self, claim: FoundClaim, kind: str, context: list[Relation], deadline: float, after: str
    ) -> StepVerdict:
        rel = claim.relation
        assert rel is not None
        if kind == IDENTITY:
            return self._check_identity(rel, deadline)
        verdict = self._check_relation(rel, context, deadline, kind == ARITHMETIC, after)
        if claim.units_mismatch and verdict.verdict != CONTRADICTED:
            detail = f"{rel.text}: the units do not match ({claim.units_mismatch})"
            return StepVerdict(CONTRADICTED, "", _short(detail))
        if verdict.verdict == CONTRADICTED and claim.converted is not None:
            # "75 cents * 4 = 3 dollars": false as written, true with its units converted.
            other = self._check_relation(claim.converted, context, deadline, kind == ARITHMETIC)
            if other.verdict != CONTRADICTED:
                return other
            detail = f"{rel.text} is false, as written and with its units converted"
            return StepVerdict(CONTRADICTED, "", _short(detail))
        return verdict

    def _check_identity(self, rel: Relation, deadline: float) -> StepVerdict:
        values = counterexample(rel, self.limits)
        if values is not None:
            if nearly(rel, values, self.limits) and "." in rel.text:
                return StepVerdict(CONSISTENT, "", _short(f"{rel.text} holds when rounded"))
            detail = f"{rel.text} is not an identity: false for {describe(values)}"
            return StepVerdict(CONTRADICTED, "", _short(detail))
        holds_all = self.state.holds_for_all(rel, deadline)
        if holds_all is None:
            return StepVerdict(UNKNOWN, self.state.timeout_reason(deadline), _short(rel.text))
        if holds_all:
            return StepVerdict(ENTAILED)
        return StepVerdict(CONTRADICTED, "", _short(f"{rel.text} is not an identity"))

    def _check_relation(
        self, rel: Relation, context: list[Relation], deadline: float, ground: bool, after: str = ""
    ) -> StepVerdict:
        try:
            value = self._ground_value(rel) if ground else None
        except ClaimError as e:
            return StepVerdict(UNKNOWN, e.reason, _short(f"{rel.text}: {e}"))
        except _Undefined:
            return StepVerdict(CONTRADICTED, "", _short(f"{rel.text}: division by zero"))
        if value is None:
            return self.state.check([rel], deadline, 1, context)
        if self.state.is_sat(deadline) is not True:  # unsat or undecided state
            return self.state.unknown_state(deadline, 1)
        if value:
            return StepVerdict(ENTAILED)
        if meant := as_meant(rel, after, self.limits):  # "10 / 3 = 3.33", "100 - 5 = 95%"
            return StepVerdict(CONSISTENT, "", _short(f"{rel.text}: {meant}"))
        return StepVerdict(CONTRADICTED, "", _short(f"{rel.text} is false"))

    def _ground_value(self, rel: Relation) -> bool | None:
        """True/False for a claim without variables, None when it has one."""
        if expr_variables(rel.lhs) or expr_variables(rel.rhs):
            return None
        try:
            lhs, rhs = evaluate(rel.lhs, self.limits), evaluate(rel.rhs, self.limits)
        except ZeroDivisionError:
            raise _Undefined from None
        if lhs is None or rhs is None:
            return None
        return holds(lhs, rel.op, rhs)


# ---- stateless entry point (the task queue's) ------------------------------------------------

CACHE_SIZE = 256
_cache: OrderedDict[tuple, Checker] = OrderedDict()
_cache_lock = threading.Lock()


def _checker_for(
    problem: str, premises: tuple[str, ...], accepted: tuple[str, ...], timeout_ms: int
) -> Checker:
    """A cached checker for this prefix, or one moved forward from the longest cached prefix.

    A checker is only ever stored under one key; extending it removes it from its old key first,
    so no cached entry is mutated behind another key's back.
    """
    key = (problem, premises, accepted, timeout_ms)
    checker = _cache.get(key)
    if checker is not None:
        _cache.move_to_end(key)
        return checker
    start = 0
    for cut in range(len(accepted) - 1, -1, -1):
        old = (problem, premises, accepted[:cut], timeout_ms)
        if old in _cache:
            checker, start = _cache.pop(old), cut
            break
    if checker is None:
        checker = Checker(premises, problem, timeout_ms=timeout_ms)
    for step in accepted[start:]:
        checker.accept(step)
    _cache[key] = checker
    while len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return checker


def check_step(
    problem: str,
    premises: Sequence[str],
    accepted: Sequence[str],
    step: str,
    *,
    timeout_ms: int = 200,
) -> StepVerdict:
    """Check `step` after `accepted` (in order) under the problem's premises; never raises.

    Checkers are kept in a process-wide LRU keyed by the prefix, so the calls of one job reuse
    the work of the previous call. Calls are serialized by a lock: one check at a time per
    process (a Celery prefork worker runs one task per process anyway).
    """
    try:
        with _cache_lock:
            checker = _checker_for(problem, tuple(premises), tuple(accepted), timeout_ms)
            return checker.check(step)
    except Exception as e:  # noqa: BLE001 - the task must always get a verdict
        return StepVerdict(UNKNOWN, SOLVER, _short(f"{type(e).__name__}: {e}"))


def clear_cache() -> None:
    """Drop every cached checker and parsed step (tests and benchmarks)."""
    with _cache_lock:
        _cache.clear()
    clear_parse_cache()
    prose.clear_cache()
