"""The thinking-budget controller (docs/budget.md): a pure control law and its Redis state.

Per SLO class, a PI law on log(max_thinking_tokens) holds the p95 end-to-end latency inside a
band just under the class SLO, so it spends as much thinking as the SLO allows; a brake cuts
the budget at once when p95 (or the consumer lag) is far over. `max_steps` and the probe
effort follow the token budget. The law is plain code driven by the caller's clock (`now_s`),
so the simulator (pipeline/budget_sim.py) and the tests run it without sleeping. The limits
live in one Redis hash per class with a version bumped on every publish. docs/budget.md has
the equations and the measured figures.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from redis.asyncio import Redis
from redis.exceptions import RedisError

from pipeline import schema

SLO_CLASSES: tuple[schema.SloClass, ...] = ("interactive", "batch")


@dataclass(slots=True, frozen=True)
class SloClassConfig:
    """Targets, bounds and gains of one SLO class's budget law."""

    slo_p95_ms: float = 2000.0
    min_thinking_tokens: int = 32
    max_thinking_tokens: int = 512
    min_steps: int = 4
    max_steps: int = 64
    tokens_per_step: int = 8  # max_steps = thinking tokens / this, within the step bounds
    min_probe_effort: int = 1  # probe_effort: steps between early-exit answer probes
    max_probe_effort: int = 8
    probes_per_job: int = 8  # probe_effort = max_steps / this: the probe count stays flat
    window_s: float = 6.0  # latencies of jobs completed in the last window_s seconds
    min_samples: int = 20  # fewer in the window: p95 is noise, the law holds
    control_period_s: float = 2.0
    band_lo: float = 0.80  # hysteresis: no change while band_lo*SLO <= p95 <= band_hi*SLO
    band_hi: float = 0.95
    kp: float = 0.10  # velocity-form PI gains on log(tokens), per period
    ki: float = 0.10
    max_rise: float = math.log(1.5)  # one period raises the budget by at most 1.5x
    brake_ratio: float = 1.25  # p95 above this x SLO: cut by brake_factor at once
    brake_factor: float = 0.7
    # Queued work (lag / completion rate) as a fraction of the SLO: above lag_hold_frac the
    # budget may not rise, above lag_cut_frac the PI cuts, above lag_brake_frac it brakes.
    lag_hold_frac: float = 0.1
    lag_cut_frac: float = 0.2
    lag_brake_frac: float = 0.5
    brake_hold_periods: int = 3  # after a brake, wait for the window to see its effect

    def with_slo(self, slo_p95_ms: float) -> SloClassConfig:
        """This class at another SLO: the window and the control period keep their ratio to
        the SLO (the law's dynamics are in units of the SLO)."""
        k = slo_p95_ms / self.slo_p95_ms
        return replace(
            self,
            slo_p95_ms=slo_p95_ms,
            window_s=self.window_s * k,
            control_period_s=self.control_period_s * k,
        )

    def __post_init__(self) -> None:
        if self.slo_p95_ms <= 0:
            raise ValueError("slo_p95_ms must be positive")
        if not 1 <= self.min_thinking_tokens <= self.max_thinking_tokens:
            raise ValueError("need 1 <= min_thinking_tokens <= max_thinking_tokens")
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError("need 1 <= min_steps <= max_steps")
        if not 1 <= self.min_probe_effort <= self.max_probe_effort:
            raise ValueError("need 1 <= min_probe_effort <= max_probe_effort")
        if self.tokens_per_step < 1 or self.probes_per_job < 1 or self.min_samples < 1:
            raise ValueError("tokens_per_step, probes_per_job and min_samples must be >= 1")
        if self.window_s <= 0 or self.control_period_s <= 0:
            raise ValueError("window_s and control_period_s must be positive")
        if not 0 < self.band_lo <= self.band_hi <= 1.0 < self.brake_ratio:
            raise ValueError("need 0 < band_lo <= band_hi <= 1 < brake_ratio")
        if not 0 < self.brake_factor < 1:
            raise ValueError("brake_factor must be in (0, 1)")
        if self.kp < 0 or self.ki <= 0 or self.max_rise <= 0:
            raise ValueError("gains and max_rise must be positive")
        if not 0 < self.lag_hold_frac <= self.lag_cut_frac <= self.lag_brake_frac:
            raise ValueError("need 0 < lag_hold_frac <= lag_cut_frac <= lag_brake_frac")
        if self.brake_hold_periods < 0:
            raise ValueError("brake_hold_periods must be >= 0")


@dataclass(slots=True, frozen=True)
class BudgetConfig:
    """Both SLO classes; the one place for the budget law's defaults."""

    interactive: SloClassConfig = field(default_factory=SloClassConfig)
    # Batch trades latency for thinking: a 10x looser SLO, longer windows, slower periods.
    batch: SloClassConfig = field(
        default_factory=lambda: SloClassConfig(
            slo_p95_ms=20_000.0, window_s=60.0, control_period_s=10.0, min_samples=10
        )
    )

    def for_class(self, slo_class: str) -> SloClassConfig:
        if slo_class not in SLO_CLASSES:
            raise ValueError(f"unknown SLO class {slo_class!r}")
        return getattr(self, slo_class)

    @classmethod
    def scaled(
        cls,
        slo_ms: float | None = None,
        batch_slo_ms: float | None = None,
        max_thinking_tokens: int | None = None,
    ) -> BudgetConfig:
        """The defaults, with each class's SLO (STEPWISE_SLO_MS, STEPWISE_BATCH_SLO_MS) and the
        law's upper token bound (STEPWISE_MAX_THINKING_TOKENS) where given. A changed SLO
        scales the class's window and control period with it (a law that looks 6 s back
        cannot hold a 20 s SLO); a value that is not positive is a ValueError."""
        base = cls()
        out = {}
        for name, slo in (("interactive", slo_ms), ("batch", batch_slo_ms)):
            cfg = base.for_class(name)
            if slo is not None:
                cfg = cfg.with_slo(_positive("SLO", slo))
            if max_thinking_tokens is not None:
                top = int(_positive("max_thinking_tokens", max_thinking_tokens))
                cfg = replace(cfg, max_thinking_tokens=max(top, cfg.min_thinking_tokens))
            out[name] = cfg
        return cls(**out)


def _positive(what: str, value: float) -> float:
    if value <= 0:
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    return value


DEFAULT_BUDGET_CONFIG = BudgetConfig()


@dataclass(slots=True, frozen=True)
class BudgetLimits:
    """What the controller publishes per class; ingest stamps it, decode re-reads it."""

    max_steps: int
    max_thinking_tokens: int
    probe_effort: int  # steps between early-exit answer probes (1: probe after every step)
    version: int = 0  # Redis version it was published (or read) under; 0: not published

    def to_budget(self) -> schema.Budget:
        return schema.Budget(
            max_steps=self.max_steps,
            max_thinking_tokens=self.max_thinking_tokens,
            probe_effort=self.probe_effort,
            version=self.version,
        )


def limits_for(cfg: SloClassConfig, tokens: float) -> BudgetLimits:
    """The published limits for a token budget: steps and probe effort follow it."""
    max_tokens = min(max(round(tokens), cfg.min_thinking_tokens), cfg.max_thinking_tokens)
    steps = min(max(math.ceil(max_tokens / cfg.tokens_per_step), cfg.min_steps), cfg.max_steps)
    probe = round(steps / cfg.probes_per_job)
    probe = min(max(probe, cfg.min_probe_effort), cfg.max_probe_effort)
    return BudgetLimits(max_steps=steps, max_thinking_tokens=max_tokens, probe_effort=probe)


# -- measurement ----------------------------------------------------------------------------


class LatencyWindow:
    """End-to-end latencies of the jobs completed in the last `window_s` seconds."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._items: deque[tuple[float, float]] = deque()  # (completed at s, latency ms)

    def add(self, now_s: float, latency_ms: float) -> None:
        self._items.append((now_s, latency_ms))

    def prune(self, now_s: float) -> None:
        cutoff = now_s - self.window_s
        while self._items and self._items[0][0] < cutoff:
            self._items.popleft()

    def count(self, now_s: float) -> int:
        self.prune(now_s)
        return len(self._items)

    def rate(self, now_s: float) -> float:
        """Completions per second over the window."""
        return self.count(now_s) / self.window_s

    def p95(self, now_s: float) -> float | None:
        """Nearest-rank p95 in ms; None when the window is empty."""
        return self.quantile(now_s, 0.95)

    def quantile(self, now_s: float, q: float) -> float | None:
        """Nearest-rank quantile of the values in the window; None when it is empty."""
        self.prune(now_s)
        if not self._items:
            return None
        values = sorted(v for _, v in self._items)
        return values[max(0, math.ceil(q * len(values)) - 1)]


# -- the law --------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Observation:
    """What one control period sees: the window's p95 and size, and optionally the lag."""

    p95_ms: float | None
    count: int
    lag_jobs: int | None = None  # jobs admitted but not started (consumer lag)
    completion_rate: float = 0.0  # jobs/s, turns the lag into a queueing time
    demand_tokens: float | None = None  # p90 of the tokens jobs in the window actually used


@dataclass(slots=True, frozen=True)
class LawState:
    """The law's memory: u = log(tokens) (the clamped output is the integrator), last error."""

    log_tokens: float
    prev_error: float = 0.0
    hold: int = 0  # periods left after a brake, while the window still holds older jobs
    brake_lag: int = 0  # lag at the last brake: a lag still growing brakes again in the hold
    action: str = "init"  # the last step: brake, hold, band, queue, pi, saturated

    @classmethod
    def initial(cls, cfg: SloClassConfig) -> LawState:
        # Start at the top: a cold system is idle, and the first over-SLO window brakes.
        return cls(log_tokens=math.log(cfg.max_thinking_tokens))

    @property
    def tokens(self) -> float:
        return math.exp(self.log_tokens)


def control_step(cfg: SloClassConfig, state: LawState, obs: Observation) -> LawState:
    """One period of the law: brake, hold, hysteresis band, or a velocity-form PI step."""
    u_min, u_max = math.log(cfg.min_thinking_tokens), math.log(cfg.max_thinking_tokens)
    slo = cfg.slo_p95_ms
    queued_ms = None
    if obs.lag_jobs is not None and obs.completion_rate > 0:
        queued_ms = 1000.0 * obs.lag_jobs / obs.completion_rate  # Little: time to drain
    p95 = obs.p95_ms if obs.count >= cfg.min_samples else None
    lag_over = queued_ms is not None and queued_ms > cfg.lag_brake_frac * slo
    over = lag_over or (p95 is not None and p95 > cfg.brake_ratio * slo)
    # The lag is seen at once, the window's p95 only after jobs finish: during the hold a
    # growing queue still brakes, so a large load step is met within a few periods.
    lag_growing = lag_over and (obs.lag_jobs or 0) > state.brake_lag
    # A cut starts from what jobs use, not from a limit none of them reaches: cutting 512 to
    # 358 when jobs stop at 100 changes nothing, and the pipeline measured that (bench/RESULTS).
    cut_from = state.log_tokens
    if obs.demand_tokens is not None and obs.demand_tokens > 0:
        cut_from = min(cut_from, max(u_min, math.log(obs.demand_tokens)))
    if (over and state.hold == 0) or lag_growing:
        # Far over: do not wait for the integrator.
        u = max(u_min, cut_from + math.log(cfg.brake_factor))
        return LawState(u, 0.0, cfg.brake_hold_periods, obs.lag_jobs or 0, "brake")
    if state.hold > 0:
        return replace(state, hold=state.hold - 1, prev_error=0.0, action="hold")
    # Two errors in log space, the tighter one wins: latency outside the band (0 inside it:
    # hysteresis), and a standing queue above its target (the pool is at capacity, so more
    # thinking would only wait in line; the lag shows this periods before the p95 does).
    error = None
    if p95 is not None:
        lo, hi = cfg.band_lo * slo, cfg.band_hi * slo
        # Outside the band, steer for its middle (not its edge, which is only approached).
        error = 0.0 if lo <= p95 <= hi else math.log(math.sqrt(lo * hi) / p95)
    in_band = error == 0.0
    if queued_ms is not None and queued_ms > cfg.lag_hold_frac * slo:
        # Between the hold and cut marks the queue only stops rises (a band of its own: a
        # Poisson queue at capacity jitters); above the cut mark it cuts in proportion.
        queue_error = min(0.0, math.log(cfg.lag_cut_frac * slo / queued_ms))
        error = queue_error if error is None else min(error, queue_error)
    if error is None:
        return replace(state, prev_error=0.0, action="hold")  # too few samples to judge
    if error == 0.0:
        return replace(state, prev_error=0.0, action="band" if in_band else "queue")
    delta = cfg.kp * (error - state.prev_error) + cfg.ki * error
    # Rises are capped (latency reacts late to a budget raise), cuts are not.
    delta = min(delta, cfg.max_rise)
    u = (cut_from if delta < 0 else state.log_tokens) + delta
    # Anti-windup: the state is the clamped output, so a long saturation stores nothing and
    # the first period with an error of the other sign moves the budget off its bound.
    clamped = min(max(u, u_min), u_max)
    return LawState(clamped, error, 0, 0, "saturated" if clamped != u else "pi")


class BudgetController:
    """One SLO class's law with its latency window; feed it Results, call `update` per period."""

    def __init__(self, cfg: SloClassConfig) -> None:
        self.cfg = cfg
        self.window = LatencyWindow(cfg.window_s)
        self.used = LatencyWindow(cfg.window_s)  # tokens used per job, same window
        self.state = LawState.initial(cfg)

    def observe(self, now_s: float, latency_ms: float, used_tokens: int | None = None) -> None:
        self.window.add(now_s, latency_ms)
        if used_tokens is not None:
            self.used.add(now_s, float(used_tokens))

    def update(
        self, now_s: float, lag_jobs: int | None = None, completion_rate: float | None = None
    ) -> BudgetLimits:
        """One period of the law. `completion_rate` (jobs/s) is the rate that drains the queue
        `lag_jobs` counts; None: this class's own, right when the queue holds only its jobs. A
        queue shared with other classes drains at all their rates: the pipeline passes the sum,
        so another class's backlog is not divided by this class's (smaller) rate."""
        rate = self.window.rate(now_s) if completion_rate is None else completion_rate
        obs = Observation(
            p95_ms=self.window.p95(now_s),
            count=self.window.count(now_s),
            lag_jobs=lag_jobs,
            completion_rate=rate,
            demand_tokens=self.used.quantile(now_s, 0.9),
        )
        self.state = control_step(self.cfg, self.state, obs)
        return self.limits

    @property
    def limits(self) -> BudgetLimits:
        return limits_for(self.cfg, self.state.tokens)


# -- Redis state ----------------------------------------------------------------------------

_FIELDS = ("max_steps", "max_thinking_tokens", "probe_effort")


def budget_key(prefix: str, slo_class: str) -> str:
    return f"{prefix}budget:{slo_class}"


async def publish(redis: Redis, prefix: str, slo_class: str, limits: BudgetLimits) -> int:
    """Writes the class's limits and bumps its version in one MULTI/EXEC; returns the version.

    The version is a field of the same hash, so a reader's HGETALL sees limits and version
    from the same publish; HINCRBY keeps it increasing across controller restarts."""
    key = budget_key(prefix, slo_class)
    mapping = {name: getattr(limits, name) for name in _FIELDS}
    mapping["updated_ms"] = int(time.time() * 1000)
    async with redis.pipeline(transaction=True) as p:
        p.hset(key, mapping=mapping)
        p.hincrby(key, "version", 1)
        _, version = await p.execute()
    return int(version)


async def read(redis: Redis, prefix: str, slo_class: str) -> BudgetLimits | None:
    """The class's published limits; None when nothing was published (callers use defaults)."""
    raw = await redis.hgetall(budget_key(prefix, slo_class))
    if not raw:
        return None
    got = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
    return BudgetLimits(
        max_steps=got["max_steps"],
        max_thinking_tokens=got["max_thinking_tokens"],
        probe_effort=got["probe_effort"],
        version=got.get("version", 0),
    )


class BudgetReader:
    """Cached reads of the live limits: ingest reads per admission, decode per step boundary,
    so each class is fetched from Redis at most once per `refresh_s`."""

    def __init__(
        self,
        redis: Redis,
        prefix: str = "stepwise:",
        refresh_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.refresh_s = refresh_s
        self.clock = clock
        self._cache: dict[str, tuple[float, BudgetLimits | None]] = {}
        # The same limits as a Budget, built once per read: decode asks for it every tick.
        self._budgets: dict[str, schema.Budget | None] = {}
        self.num_reads = 0  # Redis round trips, for tests and metrics

    async def get(self, slo_class: str) -> BudgetLimits | None:
        now = self.clock()
        hit = self._cache.get(slo_class)
        if hit is not None and now - hit[0] < self.refresh_s:
            return hit[1]
        try:
            limits = await read(self.redis, self.prefix, slo_class)
        except (RedisError, OSError):
            # Redis away: keep serving what we had (or the defaults), retry next refresh.
            limits = hit[1] if hit is not None else None
        self.num_reads += 1
        self._cache[slo_class] = (now, limits)
        self._budgets[slo_class] = limits.to_budget() if limits is not None else None
        return limits

    def cached(self, slo_class: str) -> schema.Budget | None:
        """The last limits read, as a Budget (ingest's synchronous BudgetSource); no I/O."""
        return self._budgets.get(slo_class)
