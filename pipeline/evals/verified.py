"""Verify modes on the engine directly: the decode stage's reasoning machine, a local checker.

`stepwise eval --mode verify-async|verify-strict` runs here: the same Reasoner and the same
checker as the pipeline, with the checks in a separate process (as a Celery worker would run
them) instead of behind Kafka and a task queue, so verification quality is measured fast.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass

from pipeline.decode.driver import ReasoningDriver
from pipeline.decode.reasoning import Check, ReasoningConfig
from pipeline.engine import Request, SamplingParams
from pipeline.engine.backend import StepEngine
from pipeline.evals.backends import Completion
from pipeline.stage.sampling import reasoning_params
from pipeline.verify.local import LocalVerifier


@dataclass(frozen=True, slots=True)
class VerifiedCompletion(Completion):
    wasted_tokens: int = 0
    probe_tokens: int = 0
    stop_reason: str = ""  # answer | budget | early_exit | unverified | max_tokens
    backtracks: int = 0
    checks: int = 0
    gave_up: bool = False
    verdicts: tuple[str, ...] = ()  # the final chain's, step by step


def generate_verified(
    engine: StepEngine,
    prompts: list[str],
    premises: list[tuple[str, ...]],
    params: list[SamplingParams],
    config: ReasoningConfig,
    verifier: LocalVerifier | None,
    stats: dict | None = None,
    questions: list[str] | None = None,
) -> list[VerifiedCompletion]:
    """Decode every prompt under `config.verify`; one completion per prompt, in order.

    `stats`, if given, receives `saturated_s` and `saturated_tokens`: time and tokens generated
    (kept or wasted) until fewer sequences are left than the engine runs at once — throughput
    while the batch is full, before the run's drain tail; and `finish_s`: each prompt's time
    from the start to its completion (its latency, all prompts arriving at once).
    `questions` are what the verifier reads as the problem (default: the prompts)."""
    problem_texts = questions if questions is not None else prompts
    drivers: list[ReasoningDriver | None] = []
    for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
        ids = engine.encode_prompt(prompt)
        if len(ids) >= engine.max_model_len:
            drivers.append(None)
            continue
        p = reasoning_params(p, config.verify)
        seq = engine.add(Request(f"verified-{time.monotonic_ns()}-{i}", ids, p))
        drivers.append(ReasoningDriver(engine, seq, config))
    live = [d for d in drivers if d is not None]
    inflight: dict[Future, tuple[ReasoningDriver, str]] = {}
    where = {id(d): i for i, d in enumerate(drivers)}

    def send(d: ReasoningDriver, outs: list) -> None:
        for o in outs:
            if isinstance(o, Check):
                if verifier is None:
                    raise ValueError(f"verify mode {config.verify} needs a verifier")
                i = where[id(d)]
                fut = verifier.submit(problem_texts[i], premises[i], o.accepted, o.text)
                inflight[fut] = (d, o.key)

    start, slots = time.perf_counter(), engine.config.max_num_seqs
    while live:
        if stats is not None and "saturated_s" not in stats and len(live) < slots:
            stats["saturated_s"] = time.perf_counter() - start
            stats["saturated_tokens"] = sum(
                d.seq.num_output_tokens + d.seq.num_discarded_tokens for d in drivers if d
            )
        if engine.has_schedulable:
            engine.step()
        elif inflight:  # every live sequence waits for a verdict
            wait(list(inflight), timeout=config.verdict_timeout_s, return_when=FIRST_COMPLETED)
        now = time.monotonic()
        for d in live:
            send(d, d.advance(now))
        for fut in [f for f in inflight if f.done()]:
            d, key = inflight.pop(fut)
            try:
                verdict, detail, claims = fut.result()
            except Exception as e:  # a crashed check is an unknown verdict, not a crashed eval
                verdict, detail, claims = "unknown", f"checker error: {e!r}", ()
            send(d, d.verdict(key, verdict, detail, now, claims))
        if stats is not None:
            finish = stats.setdefault("finish_s", [0.0] * len(drivers))
            for d in live:
                if d.done:
                    finish[where[id(d)]] = time.perf_counter() - start
        live = [d for d in live if not d.done]
        if live and not engine.has_schedulable and not inflight:
            raise RuntimeError(f"{len(live)} sequences stalled: paused with no check in flight")
    return [_completion(engine, d) for d in drivers]


def _completion(engine: StepEngine, d: ReasoningDriver | None) -> VerifiedCompletion:
    if d is None:
        return VerifiedCompletion("", 0, "prompt_too_long")
    seq, r = d.seq, d.reasoner
    text = engine.tokenizer.decode(seq.output_token_ids)
    return VerifiedCompletion(
        text,
        d.tokens_spent(),
        seq.finish_reason,
        wasted_tokens=seq.num_discarded_tokens,
        probe_tokens=r.num_probe_tokens,
        stop_reason=r.result_stop_reason(seq.finish_reason),
        backtracks=r.num_backtracks,
        checks=r.num_checks,
        gave_up=r.gave_up,
        verdicts=tuple(s.verdict or "unknown" for s in r.chain),
    )


def verdict_mix(completions: list[VerifiedCompletion]) -> dict[str, int]:
    return dict(Counter(v for c in completions for v in c.verdicts))
