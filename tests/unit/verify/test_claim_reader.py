"""The hand-written claim reader builds the lark parser's trees, and reads what lark reads.

Generated input: random token strings over the grammar's terminals (mostly not claims, so the
reader's refusals are exercised) and random well-formed chains (so its successes are), each
compared with the lark LALR parser of pipeline/verify/claims.py.
"""

from __future__ import annotations

import random

import pytest
from lark.exceptions import LarkError

from pipeline.verify import claim_reader, claims

PIECES = ["2", "3", "0.5", ".25", "12", "x", "y", "n", "ab", "(", ")", "+", "-", "−", "*",
          "×", "/", "÷", "^", "**", "%", "=", "<", "<=", ">=", "≠", "!=", " ", "\t", "\n",
          ","]  # fmt: skip


def lark_items(text: str, chain: bool):
    parser = claims._PARSER if chain else claims._EXPR_PARSER
    try:
        return list(parser.parse(text))
    except LarkError:
        return None


def well_formed(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 3 or r < 0.3:
        atom = rng.choice(["7", "2.5", ".5", "x", "y", "40"])
        return atom + ("%" if rng.random() < 0.1 else "")
    if r < 0.4:
        return f"({well_formed(rng, depth + 1)})"
    if r < 0.5:
        return rng.choice(["-", "−", "+"]) + well_formed(rng, depth + 1)
    if r < 0.6:  # implicit multiplication by a letter or a parenthesis
        return well_formed(rng, depth + 1) + rng.choice(["x", "(y + 1)", "y^2"])
    op = rng.choice(["+", "-", "*", "/", "^", "**", "×", "÷", "−"])
    space = rng.choice(["", " ", "\t"])
    return f"{well_formed(rng, depth + 1)}{space}{op}{space}{well_formed(rng, depth + 1)}"


@pytest.mark.parametrize("seed", range(4))
def test_on_random_token_strings_it_agrees_or_defers(seed):
    rng = random.Random(seed)
    agreed = 0
    for _ in range(3000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 9)))
        for chain in (True, False):
            mine = claim_reader.read(text, claims._number, chain=chain)
            if mine is not None:
                assert mine == lark_items(text, chain), text
                agreed += 1
    assert agreed > 50  # some of them were read, not all deferred


@pytest.mark.parametrize("seed", range(4))
def test_on_well_formed_chains_it_reads_what_lark_reads(seed):
    rng = random.Random(100 + seed)
    for _ in range(1500):
        sides = [well_formed(rng) for _ in range(rng.randint(2, 4))]
        text = "".join(s + (f" {rng.choice(['=', '<', '>=', '≠'])} " if i < len(sides) - 1 else "")
                       for i, s in enumerate(sides))  # fmt: skip
        expected = lark_items(text, True)
        mine = claim_reader.read(text, claims._number, chain=True)
        assert mine == expected, text
        if expected is not None:
            assert mine is not None


@pytest.mark.parametrize(
    "text",
    ["16 * 3 = 10 * 3 + 6 * 3 = 30 + 18 = 48", "2x^2 - 3(x + 1) = -4", "-2^2 = -4",
     "2^3^2 = 512", "50% * 80 = 40", "x = 3", "2 ^ -3x = y", "12 ÷ 4 × 3 ≠ 1"],
)  # fmt: skip
def test_the_steps_of_the_tiny_reasoner_are_read_here(text):
    mine = claim_reader.read(text, claims._number, chain=True)
    assert mine is not None and mine == lark_items(text, True)


def test_what_it_does_not_read_still_gets_lark_errors():
    for text in ["2 3 = 6", "x2 = 4", "2 + = 3", "(2 = 2", "2 = 2\n", "ab = 2"]:
        assert claim_reader.read(text, claims._number, chain=True) is None
        with pytest.raises(claims.ClaimError):
            claims.parse_sides(text)
