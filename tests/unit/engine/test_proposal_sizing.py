"""Sizing each step's proposals by what rows cost (pipeline/engine/proposal_sizing.py): the cut
is the one that gives the most tokens per second (checked against every cut there is), the
forward's cost and the proposals' chances are learned from what the engine sees, and through
the engine the outputs stay the tokens decoding without speculation gives while a full batch
verifies fewer rows than an uncut one."""

import itertools
import random
from dataclasses import replace

import pytest

from pipeline.config import EngineConfig, SpeculativeConfig
from pipeline.engine import Engine, SamplingParams
from pipeline.engine.proposal_sizing import (
    AcceptanceTable,
    Candidate,
    ForwardCost,
    size_proposals,
)
from pipeline.models.resolve import resolve_model


def table_of(chances: dict[float, float]) -> AcceptanceTable:
    """A table whose chance for a token of confidence c is chances[c], at every place."""
    t = AcceptanceTable()
    t.chance = lambda conf, place: chances[conf]
    return t


def tokens_per_row_cost(cands, table, q, base_tokens, base_rows, keeps) -> float:
    gain = 0.0
    for c, k in zip(cands, keeps, strict=True):
        p = 1.0
        for place in range(k):
            p *= table.chance(c.confs[place], place)
            gain += p
    return (base_tokens + gain) / (q + base_rows + sum(keeps))


def test_the_cut_gives_the_most_tokens_per_second_of_any_cut():
    rng = random.Random(3)
    levels = [0.1, 0.3, 0.5, 0.7, 0.9]
    table = table_of({c: 0.05 + 0.9 * c for c in levels})
    for _ in range(60):
        cands = [
            Candidate([0] * (n := rng.randint(0, 4)), [rng.choice(levels) for _ in range(n)])
            for _ in range(rng.randint(1, 4))
        ]
        q, base = rng.choice([2.0, 8.0, 30.0, 200.0]), rng.randint(1, 16)
        size_proposals(cands, table, q, base, base)
        got = tokens_per_row_cost(cands, table, q, base, base, [c.keep for c in cands])
        best = max(
            tokens_per_row_cost(cands, table, q, base, base, list(keeps))
            for keeps in itertools.product(*(range(len(c.tokens) + 1) for c in cands))
        )
        assert got == pytest.approx(best, rel=1e-9)


def test_one_job_keeps_a_long_run_and_a_full_batch_only_its_likeliest_tokens():
    table = table_of({0.9: 0.8, 0.3: 0.2})
    run = [0.9] * 12
    one = [Candidate(list(range(12)), run)]
    size_proposals(one, table, 30.0, 1, 1)
    assert one[0].keep >= 8  # 0.8**9 ~ 0.13 tokens still pays for a row at one job
    batch = [Candidate(list(range(12)), run)] + [Candidate([1, 2], [0.3, 0.3]) for _ in range(15)]
    size_proposals(batch, table, 30.0, 16, 16)
    assert 1 <= batch[0].keep < 12
    assert all(c.keep == 0 for c in batch[1:])  # 0.2 does not pay for a row beside 16


def test_a_forward_whose_rows_are_free_proposes_everything():
    cost = ForwardCost()
    for i in range(200):
        cost.observe(1 + i % 40, 0.05)  # the same time at every row count
    assert cost.fixed_rows() > 1000
    cands = [Candidate([1, 2, 3], [0.9, 0.9, 0.9]) for _ in range(16)]
    size_proposals(cands, AcceptanceTable(), cost.fixed_rows(), 16, 16)
    assert all(c.keep == 3 for c in cands)


def test_the_forward_cost_is_fitted_and_the_prior_stands_without_variation():
    cost = ForwardCost()
    assert cost.fixed_rows() == ForwardCost.PRIOR_ROWS
    rng = random.Random(0)
    for _ in range(400):
        rows = rng.randint(1, 80)
        cost.observe(rows, 0.040 + 0.002 * rows)  # a = 40 ms, b = 2 ms: q = 20 rows
    assert cost.fixed_rows() == pytest.approx(20.0, rel=0.05)
    flat = ForwardCost()
    for _ in range(50):
        flat.observe(16, 0.07)  # a full batch, never anything else
    assert flat.fixed_rows() == pytest.approx(ForwardCost.PRIOR_ROWS, rel=0.01)


def test_the_table_learns_from_the_tokens_put_to_the_test_only():
    t = AcceptanceTable()
    assert t.chance(0.9, 0) == pytest.approx(0.9) and t.chance(None, 0) == 0.5  # the priors
    for _ in range(300):
        t.update([0.9, 0.9, 0.2, 0.2], accepted=2)  # two kept, the third not, the fourth untested
    assert t.chance(0.9, 0) > 0.95 and t.chance(0.9, 1) > 0.95
    assert t.chance(0.2, 2) < 0.05
    assert t.chance(0.2, 3) < 0.05  # place 3 shares "later" with place 2
    before = AcceptanceTable()
    t2 = AcceptanceTable()
    t2.update([0.9, 0.9], accepted=0)
    assert t2.chance(0.9, 1) == before.chance(0.9, 1)  # never tested: unchanged
    for _ in range(5000):
        t2.update([None], accepted=1)
    assert t2.seen[15] <= AcceptanceTable.MAX_COUNT  # bounded: it follows the text served now


# -- through the engine -----------------------------------------------------------------------


def test_a_full_batch_verifies_fewer_rows_with_the_same_tokens():
    path = str(resolve_model("tiny-reasoner"))
    spec = SpeculativeConfig(method="suffix", num_speculative_tokens=8)
    base = EngineConfig(model=path, dtype="float32", num_threads=1)
    off = Engine(base)
    sized = Engine(replace(base, speculative=spec))
    uncut = Engine(replace(base, speculative=replace(spec, size_by_cost=False)))
    # A forward whose fixed part is worth 4 rows (a large batch on a slow CPU): the learned cost
    # is pinned so that the test does not hang on this machine's timings.
    sized.sizer.cost.fixed_rows = lambda: 4.0
    fed, feed = [], sized.sizer.cost.observe
    sized.sizer.cost.observe = lambda rows, s: (fed.append(rows), feed(rows, s))
    prompts = [f"Q: What is {a} + {b}?\n" for a, b in zip(range(3, 19), range(40, 56), strict=True)]
    params = [SamplingParams(temperature=0.7, seed=i, max_tokens=120) for i in range(16)]
    want = [o.token_ids for o in off.generate(prompts, params)]
    assert [o.token_ids for o in sized.generate(prompts, params)] == want
    assert [o.token_ids for o in uncut.generate(prompts, params)] == want
    s, u = sized.stats, uncut.stats
    assert 0 < s.num_spec_proposed < u.num_spec_proposed / 2
    # The cost fit is fed decoding forwards only (a row each, and what was proposed), never the
    # prompts' prefill, whose 16 prompts of 10 or more tokens run as one forward.
    assert 0 < len(fed) < s.num_forwards
    assert all(rows <= 16 * (1 + 8) for rows in fed)
