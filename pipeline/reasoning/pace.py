"""The engine's pace: every engine step emits one token for each running sequence, so the time
between steps is the time a sequence waits for its next token, and its pace is one over it.
The step's time grows with the batch, `t(B) = a + b * B`; the budget controller needs that line
to predict the pace a level of load would settle at, so `StepTimer` fits it on the steps it
sees (per batch size, an exponentially weighted mean), with a prior slope while the batch has
not varied enough to tell. Running jobs' deadlines are held at this pace (loop.py)."""

from __future__ import annotations

# Until the batch has varied enough to fit the line: b = t(B) / (B + this), i.e. the fixed cost
# of a step is worth this many sequences. Measured for the r1-reasoner on this machine's CPU
# (70 ms + 5 ms a sequence, bench/RESULTS.md "SLO controller"); a GPU's is larger, and the fit
# replaces it once the batch has ranged over MIN_SPREAD sizes.
PRIOR_FIXED_SEQS = 14.0
MIN_SPREAD = 4
DECAY = 0.9  # weight of the past in each batch size's mean (about ten steps)


class StepTimer:
    """The engine's step time against its batch size, from the steps it is told of."""

    def __init__(self) -> None:
        self.bins: dict[int, tuple[float, float]] = {}  # batch -> (mean step s, weight)
        self.last: tuple[int, float] | None = None  # the latest (batch, step s)
        self.ewma_s: float | None = None

    def record(self, batch: int, step_s: float) -> None:
        if batch < 1 or step_s <= 0:
            return
        mean, weight = self.bins.get(batch, (step_s, 0.0))
        self.bins[batch] = (DECAY * mean + (1 - DECAY) * step_s if weight else step_s,
                            min(weight + 1.0, 50.0))  # fmt: skip
        self.last = (batch, step_s)
        self.ewma_s = step_s if self.ewma_s is None else 0.8 * self.ewma_s + 0.2 * step_s

    @property
    def pace_tok_s(self) -> float | None:
        """Tokens per second one running sequence gets now."""
        return None if not self.ewma_s else 1.0 / self.ewma_s

    def line(self) -> tuple[float, float] | None:
        """(a, b) of t(B) = a + b * B; None before any step."""
        if self.last is None:
            return None
        sizes = sorted(self.bins)
        if sizes[-1] - sizes[0] >= MIN_SPREAD:
            fit = _weighted_fit([(b, *self.bins[b]) for b in sizes])
            if fit is not None:
                return fit
        batch, _ = self.last
        step = self.ewma_s or self.last[1]
        b = step / (batch + PRIOR_FIXED_SEQS)
        return b * PRIOR_FIXED_SEQS, b


def _weighted_fit(points: list[tuple[int, float, float]]) -> tuple[float, float] | None:
    """Least squares of t = a + b * B over (B, t, weight); None when it is not a rising line
    (noise on a narrow range can tilt it): the prior then stands."""
    sw = sum(w for _, _, w in points)
    mx = sum(w * x for x, _, w in points) / sw
    my = sum(w * y for _, y, w in points) / sw
    sxx = sum(w * (x - mx) ** 2 for x, _, w in points)
    if sxx <= 0:
        return None
    b = sum(w * (x - mx) * (y - my) for x, y, w in points) / sxx
    a = my - b * mx
    if b <= 0 or a <= 0:
        return None
    return a, b
