"""`stepwise eval` through the reasoning loop serving runs: the same budget, forcing, early exit
and verification decisions (pipeline/reasoning/loop.py), with the checks in local processes (as
a Celery worker would run them) instead of behind Kafka and a task queue, so what is measured
fast is what is served.

Every problem is a job as decode would run it: its JobParams (the sampling knobs, the verify
mode, early exit, its own thinking and step caps), the class limits a pipeline stamps when no
controller runs (`default_budget`), its sampling params and engine limit from the same
functions decode uses. A seeded job gives the tokens it gives through the pipeline (a test
holds them equal).
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass

from pipeline import schema
from pipeline.config import PipelineConfig
from pipeline.engine import Request
from pipeline.engine.base import StepEngine
from pipeline.engine.grammar import GuidedDecoding
from pipeline.evals.completers import Completion
from pipeline.reasoning.loop import ReasoningJob, ReasoningLoop, starting_config, token_limit
from pipeline.reasoning.sampling import job_params
from pipeline.reasoning.structured import held_by_grammar
from pipeline.reasoning.types import Check
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
    repairs: tuple[tuple[str, str], ...] = ()  # verify mode repair: (old, new) values kept


def default_budget(config: PipelineConfig | None = None) -> schema.Budget:
    """The class limits ingest stamps when no controller has published any."""
    config = config or PipelineConfig()
    return schema.Budget(
        max_steps=config.default_max_steps,
        max_thinking_tokens=config.default_max_thinking_tokens,
    )


def generate_verified(
    engine: StepEngine,
    prompts: list,
    premises: list[tuple[str, ...]],
    params: list[schema.JobParams],
    verifier: LocalVerifier | None,
    *,
    stats: dict | None = None,
    questions: list[str] | None = None,
    pipeline: PipelineConfig | None = None,
    reasoning: dict | None = None,
    guided: list[GuidedDecoding | None] | None = None,
) -> list[VerifiedCompletion]:
    """Decode every prompt (text, chat messages or token ids) as the pipeline's decode would run
    a job with these JobParams (each seeded); one completion per prompt, in order.

    `stats`, if given, receives `saturated_s` and `saturated_tokens`: time and tokens generated
    (kept or wasted) until fewer sequences are left than the engine runs at once — throughput
    while the batch is full, before the run's drain tail; and `finish_s`: each prompt's time
    from the start to its completion (its latency, all prompts arriving at once).
    `questions` are what the verifier reads as the problem (default: the prompts); `pipeline`:
    the knobs decode would run with (retries, backtracks, verdict timeout, default limits);
    `reasoning`: ReasoningConfig fields a job does not carry (the early-exit policy's
    `probe_agree`, `probe_confidence`), for the benches that compare them; `guided`: each
    prompt's structured output (a grammar over its answer), as decode runs a job's."""
    pipeline = pipeline or PipelineConfig()
    stamped = default_budget(pipeline)
    problem_texts = questions if questions is not None else prompts
    loop = ReasoningLoop(engine)
    jobs: list[ReasoningJob | None] = []
    for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
        ids = prompt if isinstance(prompt, list) and (not prompt or isinstance(prompt[0], int)) \
            else engine.encode_prompt(prompt)  # fmt: skip
        if len(ids) >= engine.max_model_len:
            jobs.append(None)
            continue
        if p.verify != "off" and verifier is None:
            raise ValueError(f"verify mode {p.verify} needs a verifier")
        config, start = starting_config(
            p, stamped, None, engine.reasoning_format, max_retries=pipeline.max_retries,
            max_backtracks=pipeline.max_backtracks, verdict_timeout_s=pipeline.verdict_timeout_s,
            fast_verdicts=pipeline.fast_verdicts,
        )  # fmt: skip
        config = dataclasses.replace(config, **(reasoning or {}))
        limit = token_limit(config, len(ids), engine.max_model_len)
        rid = f"verified-{time.monotonic_ns()}-{i}"
        sampling = job_params(p, p.seed or 0, limit)
        if guided is not None and guided[i] is not None:
            config = held_by_grammar(sampling, config, guided[i])
        seq = engine.add(Request(rid, list(ids), sampling))
        jobs.append(loop.start(rid, seq, config, problem_texts[i], premises[i], params=p,
                               stamped=stamped, binding=start.binding))  # fmt: skip
    live = [j for j in jobs if j is not None]
    inflight: dict[Future, tuple[ReasoningJob, str]] = {}
    where = {j.job_id: i for i, j in enumerate(jobs) if j is not None}

    def send(job: ReasoningJob, outs: list) -> None:
        for o in outs:
            if isinstance(o, Check):
                assert verifier is not None
                i = where[job.job_id]
                fut = verifier.submit(problem_texts[i], premises[i], o.accepted, o.text)
                inflight[fut] = (job, o.key)

    start_s, slots = time.perf_counter(), engine.config.max_num_seqs
    timeout = pipeline.verdict_timeout_s
    while live:
        if stats is not None and "saturated_s" not in stats and len(live) < slots:
            stats["saturated_s"] = time.perf_counter() - start_s
            stats["saturated_tokens"] = sum(
                j.seq.num_output_tokens + j.seq.num_discarded_tokens for j in jobs if j
            )
        if not loop.step() and inflight:  # every live sequence waits for a verdict
            wait(list(inflight), timeout=timeout, return_when=FIRST_COMPLETED)
        now = time.monotonic()
        for job in live:
            send(job, loop.advance(job, now, None, None))
        for fut in [f for f in inflight if f.done()]:
            job, key = inflight.pop(fut)
            try:
                verdict, detail, claims = fut.result()
            except Exception as e:  # a crashed check is an unknown verdict, not a crashed eval
                verdict, detail, claims = "unknown", f"checker error: {e!r}", ()
            send(job, loop.verdict(job, key, verdict, detail, now, claims))
        if stats is not None:
            finish = stats.setdefault("finish_s", [0.0] * len(jobs))
            for job in live:
                if job.driver.done:
                    finish[where[job.job_id]] = time.perf_counter() - start_s
        live = [j for j in live if not j.driver.done]
        if live and not engine.has_schedulable and not inflight:
            raise RuntimeError(f"{len(live)} sequences stalled: paused with no check in flight")
    return [_completion(engine, j) for j in jobs]


def _completion(engine: StepEngine, job: ReasoningJob | None) -> VerifiedCompletion:
    if job is None:
        return VerifiedCompletion("", 0, "prompt_too_long")
    d = job.driver
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
        repairs=tuple((m.old, m.new) for m in d.watch.marks) if d.watch else (),
    )
