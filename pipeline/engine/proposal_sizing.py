"""How many proposed tokens each sequence verifies in a step, weighed against what the rows cost
(pure: numbers in, counts out; the engine feeds it its own forwards and verdicts).

A forward of R rows costs about `a + b*R` seconds: a fixed part (weights read, the step around
the model) and a part per row. A step without proposals yields one token per decoding sequence
(B); each proposed token adds a row, and a token is kept only if every proposed token before it
of its sequence is too, with some probability p. Tokens per second, `(B + sum p) / (a + b*R)`,
grows by adding a row exactly when its p exceeds `(B + sum p) / (q + R)` with `q = a / b`, the
rows a forward's fixed part is worth. So the candidates are taken in falling order of p while
each clears that bar, which rises as rows are added (a sequence's p falls along its proposal, so
each keeps a prefix). One job on a CPU, q ~ 30 rows: nearly every proposed token clears it.
A full batch of 16: a token needs p > ~0.35, and only confident runs go in. This replaces a
fixed batch-size cut, which lost the confident runs in a full batch (bench/RESULTS.md).

Both figures are measured as the engine runs, not set: `ForwardCost` fits `a` and `b` to the
engine's forwards (ridge toward a prior q, since a batch that never varies its rows cannot show
b); `AcceptanceTable` learns the chance that a proposed token is kept given the one before it
was, by the proposer's own confidence in it (suffix: the tree's count ratio; ngram and a draft
model give none: one class) and its place in the proposal.
"""

from __future__ import annotations

from dataclasses import dataclass

NUM_CONF_BINS = 5  # the confidence in [0, 1] in fifths; one more class for "no confidence"
NUM_PLACES = 3  # a token's place in its proposal: first, second, later


def _cell(conf: float | None, place: int) -> int:
    b = NUM_CONF_BINS if conf is None else min(int(conf * NUM_CONF_BINS), NUM_CONF_BINS - 1)
    return b * NUM_PLACES + min(place, NUM_PLACES - 1)


class AcceptanceTable:
    """The chance a proposed token is kept once the tokens before it were, per (confidence
    class, place), learned from verdicts. Each cell starts from a prior of `PRIOR_WEIGHT`
    passes at its class's middle confidence (0.5 without one) and forgets slowly (counts are
    halved past `MAX_COUNT`), so it follows the text the engine is serving now."""

    PRIOR_WEIGHT = 4.0
    MAX_COUNT = 2000.0

    def __init__(self) -> None:
        cells = (NUM_CONF_BINS + 1) * NUM_PLACES
        self.seen = [self.PRIOR_WEIGHT] * cells
        self.kept = [0.0] * cells
        for cell in range(cells):
            b = cell // NUM_PLACES
            mid = 0.5 if b == NUM_CONF_BINS else (b + 0.5) / NUM_CONF_BINS
            self.kept[cell] = self.PRIOR_WEIGHT * mid

    def chance(self, conf: float | None, place: int) -> float:
        cell = _cell(conf, place)
        return self.kept[cell] / self.seen[cell]

    def update(self, confs: list[float | None], accepted: int) -> None:
        """A verdict on a proposal whose tokens had `confs`: the first `accepted` were kept;
        the one after them was not; those after it were never put to the test."""
        for place, conf in enumerate(confs[: accepted + 1]):
            cell = _cell(conf, place)
            self.seen[cell] += 1.0
            self.kept[cell] += place < accepted
            if self.seen[cell] > self.MAX_COUNT:
                self.seen[cell] /= 2
                self.kept[cell] /= 2


class ForwardCost:
    """A forward's time against its rows, `a + b*R`, fitted to the forwards seen (each weighs
    `DECAY` times the one after it), with the slope pulled toward the prior `q = a/b` of
    `PRIOR_ROWS` by `PRIOR_STRENGTH` (rows squared): a batch whose rows never vary shows no
    slope, and the prior then stands."""

    DECAY = 0.995
    PRIOR_ROWS = 32.0  # a CPU: a row of fp32 linears ~1/30 of a forward's fixed part
    PRIOR_STRENGTH = 64.0

    def __init__(self) -> None:
        self.w = self.sr = self.st = self.srr = self.srt = 0.0

    def observe(self, rows: int, seconds: float) -> None:
        """A decoding forward of `rows` rows took `seconds` (the engine feeds no prefill: a
        prompt's rows cost otherwise, attention over the prompt)."""
        if seconds <= 0:
            return
        d = self.DECAY
        self.w = d * self.w + 1.0
        self.sr = d * self.sr + rows
        self.st = d * self.st + seconds
        self.srr = d * self.srr + rows * rows
        self.srt = d * self.srt + rows * seconds

    def fixed_rows(self) -> float:
        """q = a / b: how many rows a forward's fixed part costs (the prior before any)."""
        if self.w == 0:
            return self.PRIOR_ROWS
        mr, mt = self.sr / self.w, self.st / self.w
        var = self.srr - self.w * mr * mr
        cov = self.srt - self.w * mr * mt
        prior_b = mt / (self.PRIOR_ROWS + mr)  # the slope at which q would be the prior's
        lam = self.PRIOR_STRENGTH
        b = (cov + lam * prior_b) / (var + lam)
        a = mt - b * mr
        if b <= 0:
            return float("inf")  # rows cost nothing measurable: propose freely
        return max(a / b, 0.0)


@dataclass(slots=True)
class Candidate:
    """One sequence's proposal as the proposer made it; `keep` is how much of it goes in."""

    tokens: list[int]
    confs: list[float | None]
    keep: int = 0


def size_proposals(
    candidates: list[Candidate],
    table: AcceptanceTable,
    fixed_rows: float,
    base_tokens: int,
    base_rows: int,
) -> float:
    """Set each candidate's `keep` (a prefix of its tokens) for the most tokens per second; the
    step without proposals computes `base_rows` rows and yields `base_tokens` tokens. Returns
    the tokens expected from the kept proposals."""
    ranked: list[tuple[float, int, int]] = []  # (chance all up to it are kept, place, which)
    for i, c in enumerate(candidates):
        c.keep = 0
        p = 1.0
        for place, conf in enumerate(c.confs):
            p *= table.chance(conf, place)
            ranked.append((p, place, i))
    ranked.sort(key=lambda r: (-r[0], r[1]))
    gain, rows = 0.0, 0
    for p, place, i in ranked:
        if p * (fixed_rows + base_rows + rows) <= base_tokens + gain:
            break  # this row, and every later (no likelier) one, would lower tokens per second
        c = candidates[i]
        if place != c.keep:
            continue  # a later token of a proposal whose earlier one did not go in (a tie)
        c.keep += 1
        gain += p
        rows += 1
    return gain


class ProposalSizer:
    """The engine's sizing of proposals: what its forwards cost (`cost`, fed each decoding
    forward) and how its proposals fared (`table`, fed each verdict), learned as it runs, and
    the cut of each step's proposals to what pays."""

    def __init__(self) -> None:
        self.table = AcceptanceTable()
        self.cost = ForwardCost()

    def size(self, candidates: list[Candidate], base_tokens: int, base_rows: int) -> float:
        fixed = self.cost.fixed_rows()
        return size_proposals(candidates, self.table, fixed, base_tokens, base_rows)
