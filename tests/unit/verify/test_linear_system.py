"""The checker's state while it is only linear equations (issue 35, item 3: cheap verdicts):
solved exactly, it fixes variables and says whether it is consistent, and a claim on fixed
variables gets the verdict Z3 would give, without Z3."""

from __future__ import annotations

import random
import time
from fractions import Fraction

import pytest

from pipeline.verify.claims import DEFAULT_LIMITS, extract_claims
from pipeline.verify.linear_system import LinearSystem
from pipeline.verify.state_solver import StateSolver


def rels(*texts: str):
    return [r for t in texts for r in extract_claims(t)]


def system(*texts: str) -> LinearSystem:
    s = LinearSystem(DEFAULT_LIMITS)
    for rel in rels(*texts):
        assert s.add(rel), rel.text
    return s


@pytest.mark.parametrize(
    ("texts", "values"),
    [
        (["x = (3 + 8 + 9) / 4"], {"x": 5}),
        (["2*x + 3 = 11"], {"x": 4}),
        (["x + y = 10", "x - y = 2"], {"x": 6, "y": 4}),
        (["b + a = 10", "b - a = 2"], {"a": 4, "b": 6}),  # pivots named in any order
        (["x + y + z = 6", "y + z = 5", "z = 3"], {"x": 1, "y": 2, "z": 3}),
        (["x/3 + 1 = 2"], {"x": 3}),
        (["x + y = 10"], {}),  # one equation, two unknowns: neither fixed
        (["x + y = 10", "2*x + 2*y = 20"], {}),  # the second says nothing new
    ],
)
def test_linear_equations_fix_what_they_determine(texts, values):
    s = system(*texts)
    assert s.consistent
    assert s.values == {k: Fraction(v) for k, v in values.items()}


def test_two_values_for_one_variable_are_inconsistent():
    assert not system("x = 1", "x = 2").consistent
    assert not system("x + y = 1", "x + y = 2").consistent
    assert system("x = 2", "2*x = 4").consistent


@pytest.mark.parametrize("text", ["x*y = 6", "x/y = 2", "x^2 = 4", "x > 3", "3 = 3"])
def test_what_is_not_a_linear_equation_is_left_to_z3(text):
    s = LinearSystem(DEFAULT_LIMITS)
    (rel,) = rels(text)
    assert not s.add(rel)
    assert s.rows == [] and s.consistent


def _random_rel(rng: random.Random, names: str, nonlinear: bool) -> str:
    terms = [f"{rng.randint(-4, 4)}*{v}" for v in rng.sample(names, rng.randint(1, len(names)))]
    if nonlinear and rng.random() < 0.3:
        terms.append(f"{names[0]}*{names[-1]}")
    op = rng.choice(["=", "=", "=", "<", ">="])
    return f"{' + '.join(terms)} {op} {rng.randint(-9, 9)}"


def _verdict(state: StateSolver, claim: str) -> str:
    deadline = time.monotonic() + 5
    return state.check(rels(claim), deadline, 1).verdict


def test_exact_verdicts_are_z3s():
    """Random states of linear equations and random claims: the verdict with S solved exactly
    equals the verdict with S in Z3 (a state of another shape goes to Z3 in both)."""
    rng = random.Random(7)
    exact = 0
    for _ in range(300):
        names = rng.choice(["x", "xy", "abc"])
        premises = rels(*(_random_rel(rng, names, True) for _ in range(rng.randint(1, 3))))
        claims = [_random_rel(rng, names, False) for _ in range(3)]
        claims += [f"{v} = {rng.randint(-3, 3)}" for v in names]
        fast, z3_only = StateSolver(DEFAULT_LIMITS), StateSolver(DEFAULT_LIMITS)
        fast.add(premises)
        z3_only.add(premises)
        z3_only._hand_to_z3()
        z3_only.sat = None  # asked of Z3 again
        for claim in claims:
            before = fast.linear is not None and fast.linear.values
            assert _verdict(fast, claim) == _verdict(z3_only, claim), (premises, claim)
            exact += bool(before)
    assert exact > 100  # the exact path was taken, not only Z3's
