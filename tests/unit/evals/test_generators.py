from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.evals import FAMILIES, TRAIN_SEED_BASE, Difficulty, generate, make_problem
from pipeline.evals.exprs import evaluate
from pipeline.evals.generators import LEVELS
from pipeline.evals.problems import CHECK_PREFIX, format_prompt, split_of
from pipeline.evals.scoring import check_claim, claims_in_line, parse_answer, score_trace

families = st.sampled_from(sorted(FAMILIES))
difficulties = st.one_of(
    st.none(),
    st.builds(Difficulty, digits=st.integers(1, 3), steps=st.integers(1, 4)),
)
seeds = st.integers(0, 2 * TRAIN_SEED_BASE)
indices = st.integers(0, 10_000)
levels = st.sampled_from(sorted(LEVELS))


def _last_values(steps: tuple[str, ...]) -> dict[str, Fraction]:
    """Final value of the last computation, and of each `var = ... = v` line."""
    out: dict[str, Fraction] = {}
    for line in steps:
        if line.startswith(CHECK_PREFIX):
            continue
        sides = [s.strip() for s in line.split("=")]
        value = evaluate(sides[-1])
        out["_"] = value
        if len(sides[0]) == 1 and sides[0].isalpha():
            out[sides[0]] = value
    return out


@settings(max_examples=400, deadline=None)
@given(families, seeds, indices, difficulties, levels)
def test_gold_chain_is_true_and_ends_in_the_answer(family, seed, index, difficulty, level):
    p = make_problem(family, seed, index, difficulty, level)
    assert p.steps, p
    for line in p.steps:
        claims = claims_in_line(line)
        assert claims is not None, f"not well-formed: {line!r}"
        for claim in claims:
            assert check_claim(claim) is True, f"false or uncheckable: {line!r}"
    gold = parse_answer(p.answer)
    last = _last_values(p.steps)
    if isinstance(gold, dict):
        assert gold == {k: v for k, v in last.items() if k in gold}
    else:
        assert gold == last["_"], (p.steps, p.answer)
    trace = score_trace(p.solution, p.answer)
    assert trace.correct and trace.num_well_formed == trace.num_lines
    assert trace.num_equations == trace.num_equations_right == len(p.steps)


@settings(max_examples=200, deadline=None)
@given(families, seeds, indices, difficulties)
def test_premises_hold_for_the_gold_answer(family, seed, index, difficulty):
    p = make_problem(family, seed, index, difficulty)
    gold = parse_answer(p.answer)
    env = gold if isinstance(gold, dict) else {"x": gold}
    for premise in p.premises:
        (claim,) = claims_in_line(premise)
        assert check_claim(claim, env) is True, (premise, p.answer)


@settings(max_examples=100, deadline=None)
@given(families, seeds, indices, difficulties)
def test_same_seed_same_problem(family, seed, index, difficulty):
    assert make_problem(family, seed, index, difficulty) == make_problem(
        family, seed, index, difficulty
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generate_is_deterministic_distinct_and_held_out(family):
    a = generate(family, 40, seed=7)
    assert a == generate(family, 40, seed=7)
    assert a != generate(family, 40, seed=8)
    assert len({p.question for p in a}) == 40
    assert all(split_of(p.question) == "test" for p in a)
    train = generate(family, 40, seed=TRAIN_SEED_BASE + 7, split="train")
    assert all(split_of(p.question) == "train" for p in train)


def test_seed_ranges_are_enforced():
    with pytest.raises(ValueError):
        generate("arith", 1, seed=TRAIN_SEED_BASE, split="test")
    with pytest.raises(ValueError):
        generate("arith", 1, seed=0, split="train")
    with pytest.raises(KeyError):
        generate("nope", 1)


def test_difficulty_knobs_are_checked_and_respected():
    with pytest.raises(ValueError):
        Difficulty(digits=4)
    with pytest.raises(ValueError):
        Difficulty(steps=0)
    for p in generate("arith", 30, seed=3, difficulty=Difficulty(digits=1, steps=4)):
        assert len([s for s in p.steps if not s.startswith(CHECK_PREFIX)]) == 4
    for p in generate("word", 30, seed=3, difficulty=Difficulty(digits=1, steps=1)):
        assert all(int(tok) < 200 for tok in p.question.replace(".", " ").split() if tok.isdigit())


def test_prompt_is_one_line():
    p = make_problem("word", 0, 0)
    prompt = format_prompt(p)
    assert prompt.startswith("Q: ") and prompt.endswith("\n") and prompt.count("\n") == 1
    assert format_prompt("a\nb") == "Q: a b\n"


def test_levels():
    easy = generate("arith", 50, seed=1, level="easy")
    assert easy == generate("arith", 50, seed=1)  # the default level is what the model learned
    assert easy != generate("arith", 50, seed=1, level="standard")
    with pytest.raises(KeyError):
        make_problem("arith", 0, 0, level="nope")
