"""Decode's engine core: handoffs in, one engine step per tick, what to publish out.

It owns the engine and every running job (vLLM V1's EngineCore plays the same part): it imports
each handoff's KV (or prefills the prompt again when the buffer is gone), runs the step, applies
the verdicts that arrived (a contradiction rolls the sequence back) and the live budgets, splices
cached verified steps in, and returns a Tick: encoded events, finished Results, KV buffers to
ack, steps to verify, steps to cache, and its telemetry. No broker, no acks, no event loop: the
decode worker's I/O side does all of that, in another process (`core_serve.py`) or on the
event loop of the same one (`core_client.ThreadCore`).
"""

from __future__ import annotations

import contextlib
import logging
import time

import msgspec
from redis import Redis as SyncRedis

from pipeline import schema
from pipeline.budget import Pace
from pipeline.cache import CACHEABLE_VERDICTS, SCOPES, Cache, CacheConfig, Scope, step_key
from pipeline.config import PipelineConfig
from pipeline.decode.kv_intake import KVIntake, kv_mark
from pipeline.decode.load import LoadTracker, load_report
from pipeline.decode.messages import Inward, StepPut, Tick, TickStats, TraceMark
from pipeline.decode.results import JobRun, finish, outward, token_events
from pipeline.decode.tool_output import ToolOutput, parser_name
from pipeline.engine.base import StepEngine
from pipeline.errors import StepwiseError
from pipeline.reasoning.loop import ReasoningLoop, starting_config, token_limit
from pipeline.reasoning.sampling import handoff_params
from pipeline.reasoning.structured import guided_decoding, held_by_grammar
from pipeline.reasoning.types import Note
from pipeline.stage.worker import now_ms
from pipeline.transfer.kv_import import KVImporter

log = logging.getLogger(__name__)

REPORT_EVERY_S = 1.0  # the load report's period (the budget worker reads it about as often)


class DecodeCore:
    def __init__(self, engine: StepEngine, config: PipelineConfig, verdict_stream: str) -> None:
        self.engine = engine
        self.config = config
        self.verdict_stream = verdict_stream  # where this worker's verdicts come back
        self.intake = KVIntake(engine, KVImporter.from_config(config))
        self.cache = Cache(None, CacheConfig(key_prefix=config.topic_prefix))  # type: ignore[arg-type]
        # Cached steps are looked up here, at step boundaries: a blocking GET with a short
        # timeout (a slow Redis only means the step is generated instead).
        self.redis = SyncRedis.from_url(config.redis, socket_timeout=0.05)
        self.pending: list[schema.Handoff] = []  # to start in the next tick
        self.verdicts: list[schema.VerdictMessage] = []
        self.budgets: dict[str, schema.Budget] = {}
        self.runs: dict[str, JobRun] = {}
        self.traced: set[str] = set()  # pending handoffs whose trace is sampled
        self._stats = TickStats()
        self._engine_counts = _engine_counts(engine)  # to report each tick's increase
        # The live pace and load, for jobs' deadlines and the budget controller's report.
        self.loop = ReasoningLoop(engine)  # the engine's steps, every job's budget and reasoning
        self.load = LoadTracker()
        self._reported_at = 0.0

    @property
    def num_runs(self) -> int:
        return len(self.runs)

    @property
    def wants_tick(self) -> bool:
        """Something to do now: jobs to start, verdicts to apply, or sequences to step."""
        return bool(
            any(self.intake.can_start(h) for h in self.pending)
            or self.verdicts
            or (self.runs and self.engine.has_schedulable)
        )

    @property
    def report_due(self) -> bool:
        """The budget controller's load report is due: an idle core ticks for it too (the
        controller must see the load gone, not the last busy report again)."""
        return time.monotonic() - self._reported_at >= REPORT_EVERY_S

    @property
    def waiting_on_io(self) -> bool:
        """A job's KV is on its way over the network: look again soon, not in 100 ms."""
        return self.intake.reading is not None

    def take(self, msg: Inward) -> None:
        self.pending += msg.handoffs
        self.traced.update(msg.traced)
        self.verdicts += msg.verdicts
        if msg.budgets is not None:
            self.budgets = msg.budgets

    def close(self) -> None:
        self.redis.close()

    # -- one tick ---------------------------------------------------------------------------

    def tick(self) -> Tick:
        """One engine step and everything around it, in this order: start the jobs that came,
        step the engine, apply the verdicts that came, advance every live job (its live budget,
        its token events, its reasoning), splice cached steps in, retire finished jobs."""
        out = Tick(stats=self._stats)
        self._stats = TickStats()
        self._admit(out)
        out.stats.generated_tokens += self.loop.step()
        counts = _engine_counts(self.engine)
        grown = [now - before for now, before in zip(counts, self._engine_counts, strict=True)]
        st, self._engine_counts = out.stats, counts
        st.forwards, st.spec_drafts, st.spec_draft_tokens, st.spec_accepted_tokens = grown
        emit, now_s = _Emitter(out, self.engine.tokenizer, now_ms()), time.monotonic()
        self._apply_verdicts(emit, now_s)
        live = self._advance(emit, now_s)
        self._splice_cached([r for r in live if not r.seq.is_finished], emit, now_s)
        self._retire(out, emit)
        for req in out.checks:
            self.load.check_sent(f"{req.id}/{req.key}")
        self._report(out, emit.events)
        return out

    def _admit(self, out: Tick) -> None:
        """Start the handoffs that came; one that cannot run here gets an error Result."""
        new, self.pending = self.pending, []
        for h in new:
            if self.intake.reads_ahead(h):
                self.pending.append(h)  # its KV is on its way: the engine steps on meanwhile
                continue
            traced = h.id in self.traced
            self.traced.discard(h.id)
            try:
                run, kv_ack = self._start(h, out.marks if traced else None)
            except Exception as e:
                log.exception("%s: cannot start", h.id)
                self.intake.forget(h)
                out.results.append(error_result(h, e))
                continue
            self.runs[h.id] = run
            if kv_ack:
                out.kv_acks.append(kv_ack)

    def _apply_verdicts(self, emit: _Emitter, now_s: float) -> None:
        verdicts, self.verdicts = self.verdicts, []
        for v in verdicts:
            self.load.verdict_in(f"{v.id}/{v.key}")
            run = self.runs.get(v.id)
            if run is not None:  # else: a job that finished or moved on
                try:
                    emit(
                        run,
                        self.loop.verdict(
                            run.job, v.key, v.verdict, v.detail or v.reason, now_s, v.claims
                        ),
                    )
                except Exception:
                    self._fail(run)

    def _advance(self, emit: _Emitter, now_s: float) -> list[JobRun]:
        """Every unfinished job after the step: its token events, then the reasoning loop's
        advance (its budget with the class's live limits, its reasoning)."""
        live = []
        pace = self.pace()
        for run in self.runs.values():
            if not run.seq.is_finished:
                try:
                    if run.reprefill_from_ns is not None and run.seq.num_output_tokens:
                        # The prompt prefilled again, its first token out: what it cost.
                        run.reprefill_ms = (time.monotonic_ns() - run.reprefill_from_ns) / 1e6
                        run.reprefill_from_ns = None
                    emit.events.extend(token_events(run, emit.tokenizer, emit.now_ms))
                    live_budget = self.budgets.get(run.handoff.slo.class_)
                    emit(run, self.loop.advance(run.job, now_s, live_budget, pace))
                    live.append(run)
                except Exception:
                    self._fail(run)
        return live

    def pace(self) -> Pace | None:
        """The live pace a running sequence gets, and what its answer needs after it (its
        pending verdicts' round trip, as measured lately)."""
        wait = self.load.verdict_wait_ms()
        return self.loop.pace(0.0 if wait is None else wait / 1000.0)

    def _retire(self, out: Tick, emit: _Emitter) -> None:
        """Finished jobs' last Events and their one Result each."""
        for job_id, run in list(self.runs.items()):
            if run.seq.is_finished:
                out.stats.step_tokens += [s.end - s.start for s in run.driver.reasoner.chain]
                try:
                    evs, result = finish(run, emit.tokenizer, emit.now_ms)
                except Exception:
                    log.exception("%s: cannot build its Result", job_id)
                    err = StepwiseError("the decode worker could not build this job's Result")
                    evs, result = [], error_result(run.handoff, err)
                emit.events.extend(evs)
                out.results.append(result)
                del self.runs[job_id]

    def _report(self, out: Tick, events: list[schema.Event]) -> None:
        # Encoded here: in a core process of its own, that work is off the I/O side's GIL.
        out.events = [(e.id, schema.encode(e)) for e in events]
        used, total = self.engine.kv_usage()
        out.stats.kv_used, out.stats.kv_total = used, total
        out.stats.num_runs = len(self.runs)
        out.stats.num_reprefills = self.intake.num_reprefills
        if (at := time.monotonic()) - self._reported_at >= REPORT_EVERY_S:
            self._reported_at = at
            out.report = load_report(self.runs.values(), self.loop.timer, self.load, self.config,
                                     len(self.pending), self.loop.deadline_cuts)  # fmt: skip

    # -- starting a job ---------------------------------------------------------------------

    def _start(
        self, h: schema.Handoff, marks: list[TraceMark] | None = None
    ) -> tuple[JobRun, tuple[str, str] | None]:
        """The job live in the engine (its KV imported, or its prompt prefilled again) and the
        KV buffer to ack; `marks`: where a traced job's import is reported."""
        engine, cfg = self.engine, self.config
        # The job's budget as it starts (pipeline/budget/effective.py: its own caps and the
        # stamped class limits; deadlines and live limits follow at every step); running out of
        # it forces the answer, and the engine's own limit sits above it, with room for that.
        live = self.budgets.get(h.slo.class_)
        reasoning, start = starting_config(
            h.params, h.budget, live, engine.reasoning_format, max_retries=cfg.max_retries,
            max_backtracks=cfg.max_backtracks, verdict_timeout_s=cfg.verdict_timeout_s,
            fast_verdicts=cfg.fast_verdicts,
        )  # fmt: skip
        params = handoff_params(h, token_limit(reasoning, len(h.token_ids), engine.max_model_len))
        if h.structured_output is not None:
            guided = guided_decoding(h.structured_output, engine, h.token_ids)
            reasoning = held_by_grammar(params, reasoning, guided)
        seq, kv_ack, kv = self.intake.take(h, params, self._stats)
        if marks is not None:
            marks.append(kv_mark(h, kv))
        # The user's question, never the rendered template (older producers: the prompt).
        problem = h.problem or engine.tokenizer.decode(h.token_ids)
        job = self.loop.start(
            h.id, seq, reasoning, problem, h.premises, params=h.params, stamped=h.budget,
            slo_class=h.slo.class_, start_ms=h.created_ms or h.admitted_ms, e2e_ms=h.slo.e2e_ms,
            binding=start.binding,
        )  # fmt: skip
        run = JobRun(h, job, problem, self.verdict_stream, now_ms(), traced=marks is not None)
        run.all_content = params.guided is not None and not params.guided.after
        run.tools = ToolOutput.for_handoff(
            h, parser_name(cfg.tool_call_parser, engine.reasoning_format.name)
        )
        self.load.started(run.started_ms - h.admitted_ms)
        run.kv_import_ms = kv.ms if kv.transport != "none" else None
        if kv.outcome == "reprefill":
            run.reprefill_from_ns = time.monotonic_ns()
        if run.traced:
            job.driver.marks = []
        # Steps enter the step cache only with a verdict, under a key that holds the verify
        # mode: a job that verifies nothing can find none, so it never asks.
        # (Nor a job held to a grammar: its steps were written under it.)
        reproducible = h.cache_key is not None and h.structured_output is None
        if reproducible and h.params.verify != "off":  # ingest: reproducible
            run.step_key = step_key(h.model, h.token_ids, h.premises, h.params)
        return run, kv_ack

    # -- the step cache ---------------------------------------------------------------------

    def _splice_cached(self, runs: list[JobRun], emit, now_s: float) -> None:
        """At step boundaries of reproducible jobs, put in the verified steps cached for them:
        one Redis round trip for every job of the tick that sits on a boundary, and one more
        for each round of steps spliced in a row (a splice is read back before the next
        lookup, else the engine would sample past the spliced delimiter)."""
        while runs:
            asks = []
            for run in runs:
                try:
                    if run.step_key is not None and (i := run.driver.wants_next_step()) is not None:
                        asks.append((run, i))
                except Exception:
                    self._fail(run)
            if not asks:
                return
            hits = self._cached_steps([r for r, _ in asks])
            runs = []
            for (run, index), hit in zip(asks, hits, strict=True):
                try:
                    if hit is not None and run.driver.splice_step(index, *hit):
                        emit(run, run.driver.advance(now_s))
                        runs.append(run)
                except Exception:
                    self._fail(run)

    def _cached_steps(self, runs: list[JobRun]) -> list[tuple[str, str] | None]:
        """The verified step that followed each run's chain before, from Redis in one MGET;
        None for a miss, and for all when Redis is slow or away (the steps are generated)."""
        keys = []
        for run in runs:
            assert run.step_key is not None
            accepted = [s.text for s in run.driver.reasoner.chain]
            keys += self.cache.step_keys(Scope.of(run.handoff), run.step_key, accepted)
        try:
            values = self.redis.mget(keys)
        except Exception:
            return [None] * len(runs)
        n = len(SCOPES)
        hits = [Cache.cached_step(values[i * n : (i + 1) * n]) for i in range(len(runs))]
        self._stats.step_hits += sum(h is not None for h in hits)
        self._stats.step_misses += sum(h is None for h in hits)
        return hits

    # -- failures ---------------------------------------------------------------------------

    def _fail(self, run: JobRun) -> None:
        """A job whose decoding raised ends with an error Result; the other jobs in the tick
        go on (an exception used to fail the whole tick, and with it Results already made)."""
        log.exception("%s: decoding failed; it ends with an error Result", run.handoff.id)
        seq = run.seq
        if not seq.is_finished:
            # The engine frees its blocks; one that lost it raises, and fail() below still
            # marks it done, so its Result goes out.
            with contextlib.suppress(Exception):
                self.engine.finish(seq.request_id, "error")
        seq.fail()  # an error whatever reason the engine gave (a held finish's, say)
        run.driver.reasoner.finished = True


def _engine_counts(engine: StepEngine) -> tuple[int, int, int, int]:
    st = engine.stats
    return st.num_forwards, st.num_spec_forwards, st.num_spec_proposed, st.num_spec_accepted


class _Emitter:
    """One tick's outward side: a job's outputs become events, checks to send and steps to
    cache, all on the tick's clock."""

    def __init__(self, out: Tick, tokenizer, now: int) -> None:
        self.out, self.tokenizer, self.now_ms = out, tokenizer, now
        self.events: list[schema.Event] = []

    def __call__(self, run: JobRun, outs) -> None:
        evs, reqs = outward(run, outs, self.tokenizer, self.now_ms)
        self.events.extend(evs)
        self.out.checks.extend(reqs)
        if run.step_key is not None:
            self.out.puts.extend(verified_steps(run, outs))
        if run.traced:
            self.out.marks.extend(trace_marks(run, outs))


def trace_marks(run: JobRun, outs) -> list[TraceMark]:
    """A traced job's moments in these outputs: its notes (steps, verdicts, backtracks) and
    what its driver did that no note says (forced answers, early exits)."""
    now, job = time.time_ns(), run.handoff.id
    marks = []
    for o in outs:
        if isinstance(o, Note):
            attrs = {"verdict": o.verdict, "detail": o.detail[:200] or None}
            if o.kind == "step":
                attrs["chars"] = len(o.text)
            # Text dropped with no contradiction (a forced answer's cut, an early exit's dropped
            # steps) is a `cut`: the trace's backtracks are the job's resamples.
            kind = "cut" if o.kind == "backtrack" and o.verdict is None else o.kind
            marks.append(
                TraceMark(job, kind, now, o.step, 0, {k: v for k, v in attrs.items() if v})
            )
    if run.driver.marks:
        marks += [TraceMark(job, kind, now, -1, 0, attrs) for kind, attrs in run.driver.marks]
        run.driver.marks.clear()
    return marks


def error_result(h: schema.Handoff, e: Exception) -> schema.Result:
    err = e if isinstance(e, StepwiseError) else StepwiseError(repr(e))
    return msgspec.structs.replace(schema.rejected_result(h.id, err), status="error")


def verified_steps(run: JobRun, outs) -> list[StepPut]:
    """The steps these outputs verified, with the chain before each (for the step cache)."""
    chain = run.driver.reasoner.chain
    h = run.handoff
    found = []
    for o in outs:
        if not (isinstance(o, Note) and o.kind == "verdict") or o.detail == "cached":
            continue
        if o.verdict in CACHEABLE_VERDICTS and o.step < len(chain) and chain[o.step].text == o.text:
            before = [s.text for s in chain[: o.step]]
            assert run.step_key is not None
            found.append(StepPut(h.tenant, h.app, h.user, run.step_key, before, o.text, o.verdict))
    return found
