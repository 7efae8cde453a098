"""An incremental Z3 checker: is a step's claim implied, refuted, or neither, by what came before?

State S = the premises (the job's premise strings and the relations in the problem text) plus
the claims of the accepted steps. For a step with claims C (their conjunction):

* no claims -> no_claim; a limit or unreadable text -> unknown("limit" / "unparseable");
* S unsat -> unknown("inconsistent_premises");
* S and C unsat -> contradicted; S and not C unsat -> entailed; else consistent;
* Z3 gives up -> unknown("timeout") when the deadline was hit, else unknown("solver").

Claims without variables are decided by exact Fraction arithmetic, without Z3; a Z3 context
is only created when a variable appears. A claim asserts that its divisions are defined:
dividing by a constant zero makes it false (contradicted, detail "division by zero"), and
`a / d` with a symbolic `d` adds `d != 0` to the claim. Variables are Reals.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import z3

from pipeline.verify import prose
from pipeline.verify.claim_ast import holds
from pipeline.verify.claims import (
    DEFAULT_LIMITS,
    ClaimError,
    ClaimLimits,
    Relation,
    clear_parse_cache,
    evaluate,
    extract_premises,
    variables,
)
from pipeline.verify.prose import LIMIT, FoundClaim, find_claims, relations
from pipeline.verify.verdicts import (
    CONSISTENT,
    CONTRADICTED,
    ENTAILED,
    INCONSISTENT_PREMISES,
    NO_CLAIM,
    SOLVER,
    TIMEOUT,
    UNKNOWN,
    ClaimVerdict,
    StepVerdict,
    _rounded,
    _short,
    _step_verdict,
    _unread,
)
from pipeline.verify.z3_terms import _Build, _shared_context, _Undefined, to_z3


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
        rels: list[Relation] = []
        for text in premises:
            found = find_claims(text, limits)
            readable = relations(found)
            if not readable or len(readable) < len(found):
                self.num_skipped_premises += 1
            rels.extend(readable)
        rels.extend(extract_premises(problem, limits))
        self.premises: tuple[Relation, ...] = tuple(dict.fromkeys(rels))
        names = variables(self.premises)
        self.answer_var: str | None = next(iter(names)) if len(names) == 1 else None
        self._ctx: z3.Context | None = None
        self._solver: z3.Solver | None = None  # incremental, holds S
        self._nl_solver: z3.Solver | None = None  # nlsat over S, for nonlinear checks
        self._state_linear = True
        self._state_bits = 0  # the largest constant in S
        self.num_dropped_claims = 0  # nonlinear claims with large numbers kept out of S
        self._vars: dict[str, z3.ArithRef] = {}
        # True/False once known; None when S changed since the last satisfiability check.
        self._state_sat: bool | None = True
        self._premises_inconsistent = False
        self._init_state()

    def _init_state(self) -> None:
        symbolic = []
        for rel in self.premises:
            try:
                value = self._ground_value(rel)
            except (ClaimError, _Undefined):
                value = False
            if value is False:
                self._state_sat, self._premises_inconsistent = False, True
                return
            if value is None:
                symbolic.append(rel)
        if symbolic:
            try:
                self._assert(symbolic)
                self._state_sat = None
                sat = self._state_is_sat(time.monotonic() + self.timeout_ms / 1000)
            except Exception:  # noqa: BLE001 - e.g. `x / 0 = 1`: a premise that cannot hold
                sat = False
            # Undecided in time (None): later checks ask again, under their own deadline.
            self._premises_inconsistent = sat is False
            self._state_sat = sat

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
        state. Accepting a claim that contradicts the state makes it unsat; every later check is
        then unknown("inconsistent_premises"). Callers should not accept contradicted steps.
        """
        self.num_accepted += 1
        try:
            found = find_claims(step, self.limits, self.answer_var)
            claims = relations(tuple(c for c in found if not c.alternative))
            symbolic = [rel for rel in claims if variables([rel])]
            if symbolic and self._state_sat is not False:
                self._assert(symbolic)
                self._state_sat = None
        except Exception:  # noqa: BLE001, S110 - an unreadable step adds nothing
            pass

    # ---- internals ---------------------------------------------------------------------------

    def _check(self, step: str) -> StepVerdict:
        deadline = time.monotonic() + self.timeout_ms / 1000
        found = find_claims(step, self.limits, self.answer_var)
        if not found:
            return StepVerdict(NO_CLAIM)
        n = len(found)
        results: list[ClaimVerdict] = []
        context: list[Relation] = []  # the step's earlier claims with variables, not refuted
        entailed = self._all_entailed(found, deadline)
        for claim in found:
            if claim.relation is None:
                results.append(_unread(claim))
                continue
            if self._premises_inconsistent:
                verdict = StepVerdict(UNKNOWN, INCONSISTENT_PREMISES, "the premises are unsat")
            elif claim in entailed:
                verdict = StepVerdict(ENTAILED)
            else:
                given = [] if claim.alternative else context
                verdict = self._check_relation(claim.relation, given, deadline)
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
            results.append(ClaimVerdict(claim.text, claim.span, v.verdict, v.reason, v.detail))
            known = verdict.verdict != CONTRADICTED and not claim.alternative
            if known and variables([claim.relation]):
                context.append(claim.relation)
        return _step_verdict(tuple(results), n)

    def _all_entailed(self, found: tuple[FoundClaim, ...], deadline: float) -> set[FoundClaim]:
        """The stated claims with variables, when S implies all of them at once: one pair of
        solves for the step (a right step's usual case), instead of a pair per claim."""
        stated = [
            c for c in found if c.relation is not None and not c.alternative
            and variables([c.relation])
        ]  # fmt: skip
        if len(stated) < 2 or self._premises_inconsistent:
            return set()
        together = self._check_symbolic([c.relation for c in stated], deadline, len(stated))
        return set(stated) if together.verdict == ENTAILED else set()

    def _check_relation(
        self, rel: Relation, context: list[Relation], deadline: float
    ) -> StepVerdict:
        try:
            value = self._ground_value(rel)
        except ClaimError as e:
            return StepVerdict(UNKNOWN, e.reason, _short(f"{rel.text}: {e}"))
        except _Undefined:
            return StepVerdict(CONTRADICTED, "", _short(f"{rel.text}: division by zero"))
        if value is None:
            return self._check_symbolic([rel], deadline, 1, context)
        if self._state_is_sat(deadline) is not True:  # unsat or undecided state
            return self._unknown_state(deadline, 1)
        if value:
            return StepVerdict(ENTAILED)
        if _rounded(rel, self.limits):
            return StepVerdict(CONSISTENT, "", _short(f"{rel.text} holds when rounded"))
        return StepVerdict(CONTRADICTED, "", _short(f"{rel.text} is false"))

    def _unknown_state(self, deadline: float, n: int) -> StepVerdict:
        if self._state_sat is False:
            return StepVerdict(UNKNOWN, INCONSISTENT_PREMISES, "the accepted steps are unsat", n)
        return StepVerdict(UNKNOWN, self._timeout_reason(deadline), "state undecided", n)

    def _check_symbolic(
        self, claims: list[Relation], deadline: float, n: int, context: list[Relation] = ()
    ) -> StepVerdict:
        try:
            claim, build = self._to_z3(claims)
            if context:  # what the step said before this claim ("let x = 5, so 2x = 10")
                given, given_build = self._to_z3(list(context))
                build.is_nonlinear |= given_build.is_nonlinear
                build.max_bits = max(build.max_bits, given_build.max_bits)
            else:
                given = None
        except ClaimError as e:
            return StepVerdict(UNKNOWN, e.reason, _short(str(e)), n)
        except _Undefined:
            text = claims[0].text if len(claims) == 1 else "a claim"
            return StepVerdict(CONTRADICTED, "", _short(f"{text}: division by zero"), n)
        texts = ", ".join(rel.text for rel in claims)
        is_linear = self._state_linear and not build.is_nonlinear
        if not is_linear and max(build.max_bits, self._state_bits) > self.limits.max_nonlinear_bits:
            # nlsat on large coefficients can run for seconds past any timeout.
            return StepVerdict(UNKNOWN, LIMIT, _short(f"{texts}: nonlinear, large numbers"), n)
        if self._state_sat is False:
            return self._unknown_state(deadline, n)
        both = claim if given is None else z3.And(given, claim)
        with_claim = self._solve(both, is_linear, deadline)
        if with_claim == z3.sat:
            self._state_sat = True  # S and C sat: S is, no need to ask on its own
        elif with_claim == z3.unsat:
            if self._state_is_sat(deadline) is not True:  # S itself unsat or undecided
                return self._unknown_state(deadline, n)
            detail = f"{texts} is refuted by the premises and accepted steps"
            return StepVerdict(CONTRADICTED, "", _short(detail), n)
        if with_claim == z3.unknown:
            return StepVerdict(UNKNOWN, self._timeout_reason(deadline), _short(texts), n)
        negated = z3.Not(claim) if given is None else z3.And(given, z3.Not(claim))
        without = self._solve(negated, is_linear, deadline)
        if without == z3.unsat:
            return StepVerdict(ENTAILED, "", "", n)
        if without == z3.unknown:
            return StepVerdict(UNKNOWN, self._timeout_reason(deadline), _short(texts), n)
        return StepVerdict(CONSISTENT, "", _short(f"{texts} is not implied"), n)

    def _timeout_reason(self, deadline: float) -> str:
        return TIMEOUT if time.monotonic() >= deadline - 0.005 else SOLVER

    def _ground_value(self, rel: Relation) -> bool | None:
        """True/False for a claim without variables, None when it has one."""
        try:
            lhs, rhs = evaluate(rel.lhs, self.limits), evaluate(rel.rhs, self.limits)
        except ZeroDivisionError:
            raise _Undefined from None
        if lhs is None or rhs is None:
            return None
        return holds(lhs, rel.op, rhs)

    def _state_is_sat(self, deadline: float) -> bool | None:
        """Whether S is sat (cached until the next accept); None when Z3 cannot tell in time."""
        if self._state_sat is None:
            result = self._solve(None, True, deadline)
            self._state_sat = None if result == z3.unknown else result == z3.sat
        return self._state_sat

    def _solve(
        self, extra: z3.BoolRef | None, is_linear: bool, deadline: float
    ) -> z3.CheckSatResult:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            return z3.unknown
        solver = self._pick_solver(is_linear and self._state_linear)
        solver.set("timeout", remaining_ms)
        if extra is None:
            return solver.check()
        solver.push()
        try:
            solver.add(extra)
            return solver.check()
        finally:
            solver.pop()

    def _pick_solver(self, is_linear: bool) -> z3.Solver:
        # Linear arithmetic: the incremental SMT solver, which honours its timeout. Nonlinear:
        # nlsat, rebuilt after each accept; the SMT core's nonlinear engines can overrun a
        # timeout by seconds, nlsat stops close to it.
        solver = self._ensure_solver()
        if is_linear:
            return solver
        if self._nl_solver is None:
            self._nl_solver = z3.Tactic("qfnra-nlsat", ctx=self._ctx).solver()
            self._nl_solver.add(solver.assertions())
        return self._nl_solver

    def _ensure_solver(self) -> z3.Solver:
        if self._solver is None:
            self._ctx = _shared_context()
            self._solver = z3.Solver(ctx=self._ctx)
        return self._solver

    def _to_z3(self, rels: list[Relation]) -> tuple[z3.BoolRef, _Build]:
        self._ensure_solver()  # creates the context the terms live in
        return to_z3(rels, self._ctx, self._vars, self.limits)

    def _assert(self, rels: list[Relation]) -> None:
        """Add `rels` to S; one that would make S nonlinear with large numbers is dropped."""
        solver = self._ensure_solver()
        for rel in rels:
            formula, build = self._to_z3([rel])
            is_linear = self._state_linear and not build.is_nonlinear
            bits = max(self._state_bits, build.max_bits)
            if not is_linear and bits > self.limits.max_nonlinear_bits:
                self.num_dropped_claims += 1
                continue
            solver.add(formula)
            self._state_linear, self._state_bits = is_linear, bits
        self._nl_solver = None


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
