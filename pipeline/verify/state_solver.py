"""The checker's state S in Z3: the premises and accepted claims with variables, and the
queries a claim makes against it (S ∧ C, S ∧ ¬C), each under what remains of one deadline.

Linear queries use one incremental SMT solver holding S (push/pop per query). Nonlinear ones
use Z3's `qfnra-nlsat` over S, rebuilt after each change: the SMT core's nonlinear engines were
measured to overrun a 200 ms timeout by seconds, nlsat stops close to it. A Z3 context is made
only when a variable first appears.

While S is only linear equations (`x = (3 + 8 + 9) / 4`, the question premise of most arithmetic
jobs; `2x + 3 = 11`; `x + y = 10, x - y = 2`), it stays out of Z3 (linear_system.py solves it
exactly): a claim whose variables S fixes is true or false by exact arithmetic, the verdict Z3
would give, without building a term. The first relation of another shape, or a claim with a
variable S leaves free, hands S to Z3 whole.
"""

from __future__ import annotations

import time

import z3

from pipeline.verify.claim_ast import at_values, expr_variables, holds
from pipeline.verify.claims import ClaimError, ClaimLimits, Relation, evaluate
from pipeline.verify.found_claim import LIMIT
from pipeline.verify.linear_system import LinearSystem
from pipeline.verify.verdicts import (
    CONSISTENT,
    CONTRADICTED,
    ENTAILED,
    INCONSISTENT_PREMISES,
    SOLVER,
    TIMEOUT,
    UNKNOWN,
    StepVerdict,
    _short,
)
from pipeline.verify.z3_terms import _Build, _shared_context, _Undefined, to_z3


class StateSolver:
    """S, and whether it is satisfiable (cached until it changes)."""

    def __init__(self, limits: ClaimLimits) -> None:
        self.limits = limits
        self._ctx: z3.Context | None = None
        self._solver: z3.Solver | None = None  # incremental, holds S
        self._nl_solver: z3.Solver | None = None  # nlsat over S, for nonlinear checks
        self._linear = True
        self._bits = 0  # the largest constant in S
        self.num_dropped_claims = 0  # nonlinear claims with large numbers kept out of S
        self._vars: dict[str, z3.ArithRef] = {}
        # True/False once known; None when S changed since the last satisfiability check.
        self.sat: bool | None = True
        self.constrained: set[str] = set()  # the variables S says something about
        # S while it is only linear equations (see the module's docstring), and the relations
        # not yet given to Z3; None once Z3 holds S.
        self.linear: LinearSystem | None = LinearSystem(limits)
        self._pending: list[Relation] = []

    def add(self, rels: list[Relation]) -> None:
        """Add `rels` to S; one that would make S nonlinear with large numbers is dropped."""
        for rel in rels:
            if self.linear is not None and self.linear.add(rel):
                self._pending.append(rel)
                self.constrained |= expr_variables(rel.lhs) | expr_variables(rel.rhs)
                if not self.linear.consistent:
                    self.sat = False
                continue
            self._hand_to_z3()
            self._assert(rel)
        if self.linear is None:
            self._nl_solver = None
            self.sat = None

    def _hand_to_z3(self) -> None:
        """S becomes Z3's from here on: the values held so far are asserted."""
        if self.linear is None:
            return
        self.linear = None
        pending, self._pending = self._pending, []
        for rel in pending:
            self._assert(rel)

    def _assert(self, rel: Relation) -> None:
        solver = self._ensure_solver()
        formula, build = self.to_z3([rel])
        is_linear = self._linear and not build.is_nonlinear
        bits = max(self._bits, build.max_bits)
        if not is_linear and bits > self.limits.max_nonlinear_bits:
            self.num_dropped_claims += 1
            return
        solver.add(formula)
        self._linear, self._bits = is_linear, bits
        self.constrained |= build.names

    def _exact(self, claims: list[Relation]) -> bool | None:
        """Whether every claim holds given the values S fixes; None when one has a variable S
        does not fix, or is past the limits of exact arithmetic."""
        assert self.linear is not None
        for claim in claims:
            rel = at_values(claim, self.linear.values)
            if rel is None:
                return None
            try:
                lhs, rhs = evaluate(rel.lhs, self.limits), evaluate(rel.rhs, self.limits)
            except ClaimError:
                return None
            except ZeroDivisionError:
                return False  # a claim asserts that its divisions are defined
            if lhs is None or rhs is None:
                return None
            if not holds(lhs, rel.op, rhs):
                return False
        return True

    def is_sat(self, deadline: float) -> bool | None:
        """Whether S is sat; None when Z3 cannot tell in time."""
        if self.sat is None:
            result = self.solve(None, True, deadline)
            self.sat = None if result == z3.unknown else result == z3.sat
        return self.sat

    def check(
        self, claims: list[Relation], deadline: float, n: int, context: list[Relation] = ()
    ) -> StepVerdict:
        """S ∧ C unsat -> contradicted; S ∧ ¬C unsat -> entailed; else consistent (with the
        step's earlier claims `context` on both sides)."""
        if self.linear is not None and not context and (exact := self._exact(claims)) is not None:
            if self.sat is False:
                return self.unknown_state(deadline, n)
            if exact:
                return StepVerdict(ENTAILED, "", "", n)
            texts = ", ".join(rel.text for rel in claims)
            detail = f"{texts} is refuted by the premises and accepted steps"
            return StepVerdict(CONTRADICTED, "", _short(detail), n)
        self._hand_to_z3()
        try:
            claim, build = self.to_z3(claims)
            if context:  # what the step said before this claim ("let x = 5, so 2x = 10")
                given, given_build = self.to_z3(list(context))
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
        is_linear = self._linear and not build.is_nonlinear
        if not is_linear and max(build.max_bits, self._bits) > self.limits.max_nonlinear_bits:
            # nlsat on large coefficients can run for seconds past any timeout.
            return StepVerdict(UNKNOWN, LIMIT, _short(f"{texts}: nonlinear, large numbers"), n)
        if self.sat is False:
            return self.unknown_state(deadline, n)
        both = claim if given is None else z3.And(given, claim)
        with_claim = self.solve(both, is_linear, deadline)
        if with_claim == z3.sat:
            self.sat = True  # S and C sat: S is, no need to ask on its own
        elif with_claim == z3.unsat:
            if self.is_sat(deadline) is not True:  # S itself unsat or undecided
                return self.unknown_state(deadline, n)
            detail = f"{texts} is refuted by the premises and accepted steps"
            return StepVerdict(CONTRADICTED, "", _short(detail), n)
        if with_claim == z3.unknown:
            return StepVerdict(UNKNOWN, self.timeout_reason(deadline), _short(texts), n)
        negated = z3.Not(claim) if given is None else z3.And(given, z3.Not(claim))
        without = self.solve(negated, is_linear, deadline)
        if without == z3.unsat:
            return StepVerdict(ENTAILED, "", "", n)
        if without == z3.unknown:
            return StepVerdict(UNKNOWN, self.timeout_reason(deadline), _short(texts), n)
        return StepVerdict(CONSISTENT, "", _short(f"{texts} is not implied"), n)

    def holds_for_all(self, rel: Relation, deadline: float) -> bool | None:
        """Whether `rel` holds for every value of its variables (where its divisions are
        defined), whatever S says: an identity. None when Z3 cannot tell in time."""
        try:
            claim, build = self.to_z3([rel], guarded=False)
        except (ClaimError, _Undefined):
            return None
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            return None
        if build.is_nonlinear and build.max_bits > self.limits.max_nonlinear_bits:
            return None
        solver = (
            z3.Solver(ctx=self._ctx)
            if not build.is_nonlinear
            else z3.Tactic("qfnra-nlsat", ctx=self._ctx).solver()
        )
        solver.set("timeout", remaining_ms)
        solver.add(*build.guards, z3.Not(claim))
        result = solver.check()
        return None if result == z3.unknown else result == z3.unsat

    def unknown_state(self, deadline: float, n: int) -> StepVerdict:
        if self.sat is False:
            return StepVerdict(UNKNOWN, INCONSISTENT_PREMISES, "the accepted steps are unsat", n)
        return StepVerdict(UNKNOWN, self.timeout_reason(deadline), "state undecided", n)

    def timeout_reason(self, deadline: float) -> str:
        return TIMEOUT if time.monotonic() >= deadline - 0.005 else SOLVER

    def solve(
        self, extra: z3.BoolRef | None, is_linear: bool, deadline: float
    ) -> z3.CheckSatResult:
        self._hand_to_z3()
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            return z3.unknown
        solver = self._pick_solver(is_linear and self._linear)
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

    def to_z3(self, rels: list[Relation], guarded: bool = True) -> tuple[z3.BoolRef, _Build]:
        self._ensure_solver()  # creates the context the terms live in
        return to_z3(rels, self._ctx, self._vars, self.limits, guarded)
