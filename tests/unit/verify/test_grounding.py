"""Errors caught through what was said before (issue 36, item 3): numbers grounded in the
problem and earlier steps, named quantities bound once."""

from __future__ import annotations

from pipeline.reasoning.machine import Note, Reasoner, ReasoningConfig, Rollback
from pipeline.schema import VerdictMessage, decode, encode
from pipeline.verify.bindings import Bindings
from pipeline.verify.checker import CONTRADICTED, ENTAILED, UNGROUNDED, Checker
from pipeline.verify.grounding import Grounding
from pipeline.verify.offline import verify_lines
from pipeline.verify.prose import find_claims
from pipeline.verify.quantities import quantities

ROBE = "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts?"
JANET = (
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
    "muffins for her friends every day with four. She sells the remainder at the farmers' "
    "market daily for $2 per fresh duck egg. How much does she make every day?"
)


def test_a_number_from_nowhere_is_ungrounded_not_contradicted():
    result = Checker((), ROBE).check("2 bolts of blue fiber are 2 * 8 = 16 bolts.")
    assert result.verdict == UNGROUNDED
    (claim,) = result.claims
    assert claim.verdict == UNGROUNDED and "8 is not in the problem" in claim.detail


def test_numbers_said_in_the_problem_or_before_are_grounded():
    checker = Checker((), JANET)
    for step in ("She uses 3 + 4 = 7 eggs a day.", "So she sells 16 - 7 = 9 eggs."):
        assert checker.check(step).verdict == ENTAILED
        checker.accept(step)
    assert checker.check("She makes 9 * 2 = $18 every day.").verdict == ENTAILED
    # Words give numbers too: "half", "a dozen", "four weeks".
    assert Checker((), ROBE).check("White fiber is 2 / 2 = 1 bolt.").verdict == ENTAILED
    # A percentage's fraction and complement are grounded by the percentage.
    checker = Checker((), "40% of the 200 students are boys. How many are girls?")
    assert checker.check("Girls are 100% - 40% = 60% of them.").verdict == ENTAILED
    assert checker.check("That is 0.6 * 200 = 120 girls.").verdict == ENTAILED


def test_a_false_claim_with_a_stray_number_stays_contradicted():
    assert Checker((), ROBE).check("So 2 * 8 = 18 bolts.").verdict == CONTRADICTED


def test_without_a_problem_nothing_is_ungrounded():
    assert Checker().check("So 2 * 8 = 16.").verdict == ENTAILED


def test_a_quantity_given_a_second_value_is_contradicted_with_both_spans():
    problem = "Mishka bought 3 pairs of shorts. One pair of pants costs $22.50 and shoes cost $42."
    step = "One pair of pants costs $16, so that is the cheapest."
    result = Checker((), problem).check(step)
    assert result.verdict == CONTRADICTED
    (claim,) = result.claims
    assert claim.kind == "binding" and claim.earlier_source == "the problem"
    assert step[claim.span[0] : claim.span[1]].endswith("16")
    start, end = claim.earlier_span
    assert problem[start:end].endswith("22.50")
    # Stated again with the same value: nothing to say.
    assert Checker((), problem).check("One pair of pants costs $22.50.").verdict == "no_claim"


def test_a_step_binds_its_quantities_for_the_later_ones():
    checker = Checker((), "Bernadette drives to work every day.")
    checker.accept("Bernadette's drive to work takes 16 minutes.")
    result = checker.check("So Bernadette's drive to work takes 64 minutes.")
    assert result.verdict == CONTRADICTED and result.claims[0].earlier_source == "step 1"


def test_quantities_that_change_are_not_bound():
    bindings = Bindings("Tom has 12 apples in his basket. He gives 3 to Ann.")
    for step in (
        "Tom has 12 - 3 = 9 apples in his basket now.",  # computed
        "Now Tom has 9 apples in his basket.",  # a change word
        "He has 9 apples.",  # too few words to name it
        "If Tom has 10 apples in his basket, ...",  # a supposition
    ):
        assert bindings.conflicts(step) == [], step
    # A problem that gives one name two values binds it to neither.
    assert (
        Bindings("Each box holds 6 red pens. Each box holds 8 red pens.").conflicts(
            "Each box holds 7 red pens."
        )
        == []
    )


def test_grounding_asks_only_about_operands():
    grounding = Grounding("Sam has 16 cards and buys 4 more.")
    found = find_claims("16 + 4 = 20, and 20 * 3 = 60 cards.")
    assert grounding.ungrounded("16 + 4 = 20, and 20 * 3 = 60 cards.", found) == {1: 3}
    # A chain's later sides are worked out, not brought in.
    step = "16 + 4 = 10 + 10 = 20"
    assert grounding.ungrounded(step, find_claims(step)) == {}


def test_ungrounded_travels_on_the_wire_and_never_backtracks():
    msg = VerdictMessage(id="j1", key="0.1", step=0, verdict="ungrounded", detail="8 from nowhere")
    assert decode(encode(msg), VerdictMessage).verdict == "ungrounded"
    reasoner = Reasoner(ReasoningConfig(verify="async"), seed=1)
    reasoner.on_step(0, 10, "2 * 8 = 16", 0.0)
    actions = reasoner.on_verdict(reasoner.chain[-1].key, "ungrounded", "8 from nowhere", 0.1)
    assert not [a for a in actions if isinstance(a, Rollback)]
    assert [a.kind for a in actions if isinstance(a, Note)] == ["verdict"]
    assert reasoner.chain[-1].verdict == "ungrounded" and reasoner.num_backtracks == 0


def test_stepwise_verify_reports_kinds_and_a_bindings_earlier_span():
    line = (
        '{"id": "t", "problem": "One pair of pants costs $22.50.", "steps": '
        '["One pair of pants costs $16.", "So 2 * 16 = 32 dollars for two."]}'
    )
    (out,) = verify_lines([line])
    first, second = out["verdicts"]
    assert first["verdict"] == CONTRADICTED
    assert first["claims"][0]["kind"] == "binding"
    assert first["claims"][0]["earlier"] == {"source": "the problem", "span": [0, 30]}
    assert second["claims"][0]["kind"] == "arithmetic"
    assert out["coverage"]["contradicted"] == 1


def test_quantities_read_numbers_as_word_problems_write_them():
    def values(text):
        return [[str(v) for v in q.values] for q in quantities(text)]

    assert values("each bead is one-quarter of an inch long") == [["1/4", "1", "4"], ["12"]]
    assert values("three-quarters of the weight, twenty-five cents") == [
        ["3/4", "3", "4"], ["25"]
    ]  # fmt: skip
    assert values("her $400 000 budget, a price of $350 000.") == [["400000"], ["350000"]]
    assert values("2 000 apples and 20% of them")[-1] == ["20", "1/5"]
    checker = Checker((), "Steve lives 3 miles from school and bikes at 440 feet per minute.")
    assert checker.check("That is 3 * 5280 = 15840 feet.").verdict == ENTAILED  # feet a mile
