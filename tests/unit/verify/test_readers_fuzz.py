"""The readers issue 36 added never raise and stay bounded in time, whatever the text: the
quantities of free text, grounding, bindings, named quantities, units (and the units numbers
were stated with), quotes of the problem, unknowns and the readings as meant. Hypothesis draws
word-problem-like text and any text."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.verify.as_meant import as_meant
from pipeline.verify.bindings import Bindings
from pipeline.verify.checker import VERDICTS, Checker
from pipeline.verify.claim_ast import DEFAULT_LIMITS
from pipeline.verify.grounding import Grounding
from pipeline.verify.prose import find_claims
from pipeline.verify.quantities import quantities
from pipeline.verify.quotes import Quotes
from pipeline.verify.stated_units import StatedUnits
from pipeline.verify.unknowns import KINDS, claim_kind, counterexample

_FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_PIECES = st.sampled_from(
    ["12", "3.5", "1,250", "0130", "$", "$2.50", "50 cents", "3/4", "1 1/2", "20%", " percent",
     " ", "=", "+", "-", " – ", "—", "*", " * ", "x", "×", "/", "(", ")", "hours", "minutes",
     "km/hr", "per day", "dozen", "half", "twice", "three", "twenty-five", "two-thirds",
     "number of novels", "the", "One pair of pants costs", "Tom has", "apples", "is", "of",
     "and", "then", "if", "so", "now", "left", "remaining", ".", ",", ";", "\n", "section",
     "<<", ">>", "#### ", "\\frac{", "}{", "}", "Step 2:", "with 1 remaining", "in all",
     " (for the shirt) ", "(girls)", " a week", "cup of dog food", "1{,}200", "≈", "\\approx",
     "~", "ratio", "7:11", "both", "each", " times as many", " mph", "three-eyed", "every"]
)  # fmt: skip
WORDY = st.lists(_PIECES, max_size=40).map("".join)


def _bounded(fn, *args) -> None:
    start = time.perf_counter()
    fn(*args)
    assert time.perf_counter() - start < 2.0


@_FUZZ
@given(st.one_of(WORDY, st.text(max_size=400)))
def test_quantities_never_raise(text):
    start = time.perf_counter()
    for q in quantities(text):
        assert 0 <= q.span[0] < q.span[1] <= len(text)
        assert q.values and all(v == v for v in q.values)
    assert time.perf_counter() - start < 1.0


@_FUZZ
@given(WORDY, WORDY, WORDY)
def test_grounding_and_bindings_never_raise(problem, earlier, step):
    grounding, bindings, units = Grounding(problem), Bindings(problem), StatedUnits(problem)
    grounding.add(earlier)
    bindings.accept(earlier, "step 1")
    units.add(earlier)
    found = find_claims(step)
    start = time.perf_counter()
    stray = grounding.ungrounded(step, found)
    assert set(stray) <= set(range(len(found)))
    assert set(units.squared(step, found)) <= set(range(len(found)))
    for mine, old in bindings.conflicts(step):
        assert mine.value != old.value
        assert 0 <= mine.span[0] <= mine.span[1] <= len(step)
        assert old.source in ("the problem", "step 1")
    assert time.perf_counter() - start < 1.0


@_FUZZ
@given(WORDY, st.lists(WORDY, max_size=3), WORDY)
def test_the_checker_never_raises_on_word_problems(problem, accepted, step):
    checker = Checker((), problem, timeout_ms=100)
    for earlier in accepted:
        checker.accept(earlier)
    start = time.perf_counter()
    result = checker.check(step)
    assert time.perf_counter() - start < 2.0
    assert result.verdict in VERDICTS
    for claim in result.claims:
        assert claim.verdict in VERDICTS
        assert claim.kind in (*KINDS, "binding", "quote", "")


@_FUZZ
@given(st.one_of(WORDY, st.text(max_size=300)))
def test_kinds_and_readings_never_raise(step):
    for claim in find_claims(step):
        rel = claim.relation
        if rel is None:
            continue
        assert claim_kind(rel, set()) in KINDS
        _bounded(counterexample, rel, DEFAULT_LIMITS)
        assert isinstance(as_meant(rel, step[claim.span[1] :], DEFAULT_LIMITS), str)
        if claim.converted is not None:
            assert claim.converted.op == rel.op


def test_hostile_word_problems_stay_bounded():
    for text in (
        "One pair of pants costs $22.50. " * 600,
        "1 1/2 / 1/2 = " * 2000,
        "5 and 2/3 = " * 3000,
        "$" + "9" * 5000 + " cents = 1 dollar",
        "number of novels " * 4000 + "* 3 = 9",
        "3x = 2x, " * 500,
    ):
        start = time.perf_counter()
        Checker((), text[:5000]).check(text)
        assert time.perf_counter() - start < 2.0, text[:40]


@_FUZZ
@given(WORDY, st.data())
def test_quotes_never_raise_on_the_problem_edited(problem, data):
    """A step that is the problem with pieces cut, changed or put in: spans stay in bounds."""
    cut = data.draw(st.integers(0, len(problem)))
    step = problem[:cut] + data.draw(WORDY) + problem[data.draw(st.integers(cut, len(problem))) :]
    start = time.perf_counter()
    for m in Quotes(problem).misquotes(step):
        assert step[m.span[0] : m.span[1]] == m.text
        assert problem[m.source_span[0] : m.source_span[1]] == m.source_text
    assert time.perf_counter() - start < 1.0
