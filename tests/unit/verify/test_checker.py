"""The Z3 checker: verdicts per claim form, adversarial input, gold traces, fuzzing, the LRU."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.evals.tasks import load_problems
from pipeline.verify import checker as checker_mod
from pipeline.verify.checker import (
    CONSISTENT,
    CONTRADICTED,
    ENTAILED,
    NO_CLAIM,
    UNKNOWN,
    VERDICTS,
    Checker,
    StepVerdict,
    check_step,
    clear_cache,
)

E, C, K, N, U = ENTAILED, CONTRADICTED, CONSISTENT, NO_CLAIM, UNKNOWN
LINEAR = ("3x + 7 = 22",)
SYSTEM = "Solve the system: 4x + y = 33, 2x - y = 3."

# (premises, problem, accepted, step, verdict, reason): true, false, consistent and
# unparseable steps for each claim form.
CASES = [
    # equation chains
    ((), "", (), "3 + 8 = 11 + 0 = 11", E, ""),
    ((), "", (), "3 + 8 = 11 = 12", C, ""),
    (LINEAR, "", (), "3x = 22 - 7 = 15", E, ""),
    (LINEAR, "", (), "x = 15 / 3 = 6", C, ""),
    ((), "", (), "x = 2 + 4 = 6", K, ""),
    ((), "", (), "x = = 6", U, "unparseable"),
    # premises
    (LINEAR, "", (), "3x = 15", E, ""),
    (LINEAR, "", (), "x = 6", C, ""),
    ((), "", (), "x = 6", K, ""),
    (LINEAR, "", (), "y > 2", K, ""),
    # inequalities
    ((), "", (), "3 < 4 <= 4", E, ""),
    ((), "", (), "5 ≥ 7", C, ""),
    (LINEAR, "", (), "x > 4", E, ""),
    (LINEAR, "", (), "x ≠ 5", C, ""),
    (LINEAR, "", (), "y != 5", K, ""),
    ((), "", (), "x =< 3", U, "unparseable"),
    # implicit multiplication
    (LINEAR, "", (), "2(x + 1) = 12", E, ""),
    (LINEAR, "", (), "(x+1)(x-1) = 24", E, ""),
    (LINEAR, "", (), "2x = 11", C, ""),
    ((), "", (), "2(x + 1) = 12", K, ""),
    ((), "", (), "2 3 = 6", U, "unparseable"),
    # parentheses
    ((), "", (), "(3 + 8 + 9) / 4 = 5", E, ""),
    ((), "", (), "3 + 8 + 9 / 4 = 5", C, ""),
    ((), "", (), "(x + 1) * 2 = 6", K, ""),
    ((), "", (), "(3 + 8 = 11", E, ""),  # prose: "(since 3 + 8 = 11" opens a remark
    # fractions and decimals
    ((), "", (), "7/2 = 3.5 = 3.50", E, ""),
    ((), "", (), "0.1 + 0.2 = 0.3", E, ""),
    ((), "", (), "1/3 = 0.33", K, ""),  # rounded: never contradicted
    ((), "", (), "10/4 = 2.6", C, ""),  # 2.5 is exact at one place: no rounding excuse
    ((), "", (), "1/3 = 0.34", C, ""),
    ((), "", (), "x = 0.5", K, ""),
    ((), "", (), "1/2. = 0.5", N, ""),  # a sentence ends at "1/2.": "= 0.5" has no left side
    # percentages
    ((), "", (), "20% * 50 = 10", E, ""),
    ((), "", (), "10% * 90 = 10", C, ""),
    ((), "", (), "x% * 50 = 10", K, ""),
    ((), "", (), "20%% * 50 = 10", U, "unparseable"),
    # GSM8K annotations
    ((), "", (), "pays <<3*4=12>>12 dollars, <<12+3=15>>15 in all", E, ""),
    ((), "", (), "pays <<3*4=13>>13 dollars", C, ""),
    ((), "", (), "pays <<3*x=12>>12 dollars", K, ""),
    ((), "", (), "pays <<3*4=12 dollars", U, "unparseable"),
    ((), "", (), "pays 12 dollars", N, ""),
    # Check:
    ((), "", (), "Check: 518 + 52 = 570", E, ""),
    ((), "", (), "Check: 518 + 52 = 580", C, ""),
    (LINEAR, "", (), "Check: 3y + 7 = 22", K, ""),
    ((), "", (), "Check: 518 + = 570", U, "unparseable"),
    # Answer:
    (LINEAR, "", (), "Answer: 5", E, ""),
    (LINEAR, "", (), "Answer: 6", C, ""),
    ((), "", (), "Answer: 5", N, ""),
    ((), SYSTEM, (), "Answer: x = 6, y = 9", E, ""),
    ((), SYSTEM, (), "Answer: x = 6, y = 8", C, ""),
    ((), SYSTEM, (), "Answer: x = 6", E, ""),
    (("x + y = 10",), "", (), "Answer: x = 4, y = 6", K, ""),
    (LINEAR, "", (), "Answer: five", U, "unparseable"),
    # accepted steps are part of the state
    (("x + y = 10",), "", ("x = 4",), "y = 6", E, ""),
    (("x + y = 10",), "", ("x = 4",), "y = 7", C, ""),
    (("x + y = 10",), "", ("Answer: 4",), "y = 6", K, ""),  # no answer_var: two variables
    # division by zero is a false claim
    ((), "", (), "5 / 0 = 3", C, ""),
    ((), "", (), "x / 0 = 3", C, ""),
    (("x = 5",), "", (), "1 / (x - 5) = 1", C, ""),
    (("x = 6",), "", (), "1 / (x - 5) = 1", E, ""),
    # premises that contradict themselves
    (("x = 1", "x = 2"), "", (), "1 + 1 = 2", U, "inconsistent_premises"),
    (("2 + 2 = 5",), "", (), "x = 1", U, "inconsistent_premises"),
    (("x / 0 = 1",), "", (), "x = 1", U, "inconsistent_premises"),
    # no claim at all
    ((), "", (), "Now add the two numbers", N, ""),
]


@pytest.mark.parametrize(("premises", "problem", "accepted", "step", "verdict", "reason"), CASES)
def test_verdicts(premises, problem, accepted, step, verdict, reason):
    checker = Checker(premises, problem)
    for prev in accepted:
        checker.accept(prev)
    result = checker.check(step)
    assert (result.verdict, result.reason) == (verdict, reason), result
    assert check_step(problem, premises, accepted, step) == result


def test_detail_and_counts():
    result = Checker().check("3 + 8 = 12")
    assert result == StepVerdict(CONTRADICTED, "", "3 + 8 = 12 is false", 1)
    assert Checker().check("5 / 0 = 3").detail == "5 / 0 = 3: division by zero"
    assert Checker().check("x = 2 + 4 = 6").num_claims == 2
    checker = Checker(["x = 1", "total = 2", "3 ="], "Solve for x: 2x = 2.")
    assert checker.num_skipped_premises == 2
    assert checker.answer_var == "x"
    assert [rel.text for rel in checker.premises] == ["x = 1", "2x = 2"]


def test_check_does_not_change_state():
    checker = Checker(LINEAR)
    assert checker.check("y = 2").verdict == CONSISTENT
    assert checker.check("y = 3").verdict == CONSISTENT  # y = 2 was not kept


def test_accept_rules():
    checker = Checker(LINEAR)
    checker.accept("4 + 4 = 9")  # a false constant claim is not added
    checker.accept("total = 5")  # unreadable: adds nothing
    assert checker.check("x = 5").verdict == ENTAILED
    checker.accept("y = x + 1")
    assert checker.check("y = 6").verdict == ENTAILED
    checker.accept("y = 7")  # contradicted: the state becomes unsat
    assert checker.check("1 + 1 = 2") == StepVerdict(
        UNKNOWN, "inconsistent_premises", "the accepted steps are unsat", 1
    )


def test_no_z3_context_for_pure_arithmetic():
    checker = Checker((), "A box holds 12 books. Ines buys 7 boxes. How many books?")
    for step in ("12 * 7 = 10 * 7 + 2 * 7 = 70 + 14 = 84", "Answer: 84"):
        checker.check(step)
        checker.accept(step)
    assert checker.state._ctx is None


# ---- adversarial input -----------------------------------------------------------------------

ADVERSARIAL = [
    "9^9^9^9 = 1",
    "1" * 10_000 + " = 5",
    "(" * 500 + "1" + ")" * 500 + " = 1",
    "1" * (1 << 20),
    "x = " + "1 + " * 300_000 + "1",
    "2^1000000 = 0",
    "(x + 1)^1000000 = 0",
    "((((2^12)^12)^12)^12)^12 = 1",
    "３ + 4 = 7",
    "3 + ٤ = 7",
]


@pytest.mark.parametrize("step", ADVERSARIAL)
def test_adversarial_is_unknown_fast(step):
    checker = Checker(LINEAR)
    start = time.perf_counter()
    result = checker.check(step)
    assert time.perf_counter() - start < 1.0
    assert result.verdict == UNKNOWN
    assert result.reason in {"limit", "unparseable", "unsupported"}


@pytest.mark.parametrize(
    ("premises", "step"),
    [
        ((), "(x+1)^12 (y+2)^12 = (x y + 12)^12 + x^11"),  # degree 24
        (("x y = 10",), "(x y + 123456789012345678901234567890)^6 = 7 / (x + 1)^6"),
        # Once ran 14 s under a 200 ms Z3 timeout (nlsat on huge coefficients).
        (
            ("(2767898095)^5 = x^4 + 48 - 785199",),
            "1872 / x * 96043439886 - (8651626^5)^10 < 7478 * 855121469405 * a * x",
        ),
    ],
)
def test_hard_nonlinear_is_refused_fast(premises, step):
    checker = Checker(premises)
    start = time.perf_counter()
    result = checker.check(step)
    assert time.perf_counter() - start < 0.5
    assert (result.verdict, result.reason) == (UNKNOWN, "limit")


def test_nonlinear_premise_with_large_numbers_is_dropped():
    checker = Checker(["x^2 = 123456789012345678901234567890", "y = 2"])
    assert checker.num_dropped_claims == 1
    assert checker.check("y = 2").verdict == ENTAILED  # the rest of S still works
    assert checker.check("x = 5").verdict == CONSISTENT  # sound, less precise


def test_unicode_digits_are_never_judged():
    for step in ("３ + 4 = 7", "3 + 4 = ７", "x = ５", "Answer: ５"):
        assert Checker(LINEAR).check(step).verdict in {UNKNOWN, NO_CLAIM}


def test_solver_timeout_is_bounded():
    checker = Checker(timeout_ms=50)
    start = time.perf_counter()
    result = checker.check("x^12 + y^12 = 3 x^5 y^7 + z^11 + 1, x^3 = y^2 + z")
    assert time.perf_counter() - start < 0.5
    assert result.verdict in {UNKNOWN, CONSISTENT}
    if result.verdict == UNKNOWN:
        assert result.reason == "timeout"


def test_checkers_run_on_threads():
    def run(answer: int) -> str:
        checker = Checker(LINEAR)
        return checker.check(f"x = {answer}").verdict

    with ThreadPoolExecutor(4) as pool:
        verdicts = list(pool.map(run, [5, 6] * 20))
    assert verdicts == [ENTAILED, CONTRADICTED] * 20


# ---- gold traces -----------------------------------------------------------------------------


# The solver's timeout is wall-clock (200 ms by default): on a loaded shared machine a gold step
# once came back `unknown (timeout)` in CI. These tests are about verdicts, not speed, so
# they give Z3 room; the timeout itself is tested above (test_solver_timeout_is_bounded).
TRACE_TIMEOUT_MS = 10_000


def _traces():
    for problem in load_problems("indist", 200, 0):
        yield problem, [*problem.steps, f"Answer: {problem.answer}"]


def test_gold_traces_are_never_contradicted():
    verdicts = {}
    for problem, steps in _traces():
        checker = Checker(problem.premises, problem.question, timeout_ms=TRACE_TIMEOUT_MS)
        for step in steps:
            result = checker.check(step)
            assert result.verdict != CONTRADICTED, (problem.question, step, result)
            assert result.verdict != UNKNOWN, (problem.question, step, result)
            verdicts[result.verdict] = verdicts.get(result.verdict, 0) + 1
            checker.accept(step)
    assert verdicts[ENTAILED] > 5 * verdicts.get(CONSISTENT, 0)


def _bump_last_number(step: str) -> str | None:
    matches = list(re.finditer(r"[0-9]+", step))
    if not matches or "=" not in step[: matches[-1].start()]:
        return None  # the last number is not on a right-hand side
    m = matches[-1]
    return f"{step[: m.start()]}{int(m.group()) + 1}{step[m.end() :]}"


def test_mutated_steps_are_contradicted():
    num_mutated = num_caught = 0
    for problem, steps in _traces():
        checker = Checker(problem.premises, problem.question, timeout_ms=TRACE_TIMEOUT_MS)
        for step in steps:
            bad = _bump_last_number(step)
            if bad is not None and not step.startswith("Answer:"):
                num_mutated += 1
                num_caught += checker.check(bad).verdict == CONTRADICTED
            checker.accept(step)
    assert num_mutated > 300
    assert num_caught / num_mutated >= 0.9


# ---- check_step and its cache ----------------------------------------------------------------


def test_check_step_walks_a_job():
    clear_cache()
    problem = "Solve the system: 4x + y = 33, 2x - y = 3."
    steps = ["6x = 33 + 3 = 36", "x = 36 / 6 = 6", "4 * 6 = 24", "y = 33 - 24 = 9"]
    for i, step in enumerate(steps):
        assert check_step(problem, (), steps[:i], step).verdict == ENTAILED
    assert check_step(problem, (), steps, "Answer: x = 6, y = 9").verdict == ENTAILED
    assert check_step(problem, (), steps, "y = 10").verdict == CONTRADICTED
    assert check_step(problem, (), steps, "1 + = 2").verdict == UNKNOWN
    assert len(checker_mod._cache) == 1  # the checker moved forward with the job


def test_check_step_cache_never_mixes_prefixes():
    clear_cache()
    premises = ("x + y = 10",)
    steps = ("y = 2 + 1 = 3", "z = 1")
    assert check_step("", premises, steps[:1], "x = 7").verdict == ENTAILED
    assert check_step("", premises, steps, "x = 7").verdict == ENTAILED  # moved forward
    # Back to a shorter prefix (a backtrack): rebuilt, and the longer entry is untouched.
    assert check_step("", premises, (), "x = 7").verdict == CONSISTENT
    assert check_step("", premises, steps[:1], "z = 1").verdict == CONSISTENT
    assert check_step("", premises, steps, "z = 1").verdict == ENTAILED
    assert check_step("", premises, steps, "x = 7").verdict == ENTAILED


def test_check_step_cache_is_bounded():
    clear_cache()
    for i in range(checker_mod.CACHE_SIZE + 10):
        assert check_step(f"Compute {i} + 1.", (), (), f"{i} + 1 = {i + 1}").verdict == ENTAILED
    assert len(checker_mod._cache) == checker_mod.CACHE_SIZE
    clear_cache()


# ---- fuzzing ---------------------------------------------------------------------------------

_ATOMS = st.one_of(
    st.integers(0, 10**12).map(str),
    st.sampled_from(["x", "y", "2x", "20%", "0.5", "0", "1", "12", "(x - 5)"]),
)
_OPS = st.sampled_from(["+", "-", "*", "/", "^", ""])
_RELS = st.sampled_from(["=", "<", ">=", "!="])


@st.composite
def step_text(draw) -> str:
    def side() -> str:
        parts = [draw(_ATOMS)]
        for _ in range(draw(st.integers(0, 6))):
            op = draw(_OPS)
            wrap = draw(st.booleans())
            atom = draw(_ATOMS)
            parts.append(f" {op} ({atom})" if wrap else f" {op} {atom}")
        return "".join(parts)

    sides = [side() for _ in range(draw(st.integers(1, 3)))]
    text = sides[0] + "".join(f" {draw(_RELS)} {s}" for s in sides[1:])
    return draw(st.sampled_from(["", "Check: ", "Answer: ", "x "])) + text


_FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_FUZZ_CHECKER = Checker(LINEAR, timeout_ms=100)


def _bounded_check(step: str) -> None:
    start = time.perf_counter()
    result = _FUZZ_CHECKER.check(step)
    assert time.perf_counter() - start < 1.0
    assert result.verdict in VERDICTS


@_FUZZ
@given(step_text())
def test_fuzz_checker_expressions(step):
    _bounded_check(step)


@_FUZZ
@given(st.text())
def test_fuzz_checker_text(step):
    _bounded_check(step)


def test_a_bare_answer_is_checked_against_the_asked_expression():
    problem = "Q: Compute 4 + 8 - 1 - 7.\n"
    wrong_chain = ("4 + 8 = 12", "12 - 1 = 11", "11 - 8 = 3")  # true arithmetic, wrong operand
    assert check_step(problem, (), wrong_chain, "Answer: 3").verdict == "contradicted"
    right_chain = ("4 + 8 = 12", "12 - 1 = 11", "11 - 7 = 4")
    assert check_step(problem, (), right_chain, "Answer: 4").verdict == "entailed"


def test_cached_checkers_share_one_z3_context():
    # A context each cost ~16 MB: 256 cached checkers grew a verify process to 4.5 GB.
    checker_mod.clear_cache()
    for i in range(3):
        check_step(f"Solve for x: {i + 2}x = {2 * (i + 2)}.", (), (), "x = 2")
    contexts = {id(c.state._ctx) for c in checker_mod._cache.values()}
    assert len(checker_mod._cache) == 3 and len(contexts) == 1 and None not in contexts
