"""Glue between one engine sequence and its reasoning state machine.

After every engine step the driver reports the sequence's new steps, tokens spent, held finish
and finished probes to the Reasoner, and applies what it asks of the engine (rollback, pause,
resume, finish, the format's forcing text, probes). What it asks of the outside world — checks
to send, notes to stream — goes back to the caller, who owns the verifier and the event stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from pipeline.engine import Engine, Request, SamplingParams
from pipeline.engine.grammar import handover
from pipeline.engine.sequence import Sequence
from pipeline.reasoning.claim_watch import ClaimWatch, FalseClaim, token_at
from pipeline.reasoning.machine import (
    Action,
    Check,
    ExitWith,
    Finish,
    ForceAnswer,
    Note,
    Pause,
    Probe,
    Reasoner,
    ReasoningConfig,
    Resume,
    Rollback,
)
from pipeline.reasoning.types import UNVERIFIED
from pipeline.toolcalls.registry import before_calls
from pipeline.verify.fast import contradicted, fast_verdict
from pipeline.verify.repair import problem_values

Outward = Check | Note
# What a cut's note says caused it, by the machine's stop reason.
CUT_CAUSES = {"budget": "budget spent", "early_exit": "early exit", UNVERIFIED: "gave up"}
# A forced answer under a grammar (structured output) is the grammar's to write: room for it.
GUIDED_ANSWER_TOKENS = 256


class ReasoningDriver:
    def __init__(
        self,
        engine: Engine,
        seq: Sequence,
        config: ReasoningConfig,
        problem: str = "",
        premises: Iterable[str] = (),
    ) -> None:
        """`problem`, `premises`: the job's question as the verifier reads it; the unknowns
        its own equations fix are values verify mode `repair` may put right (`x = 7` -> `x = 4`
        for `Solve 2x + 3 = 11`)."""
        self.engine = engine
        self.seq = seq
        self.reasoner = Reasoner(config, seq.seed, prompt_len=seq.num_prompt_tokens)
        self.probes: dict[str, Sequence] = {}  # probe key -> its side sequence
        # Finished probes' answer tokens: an exit may come later, with the last verdict.
        self.probe_answers: dict[str, list[int]] = {}
        self.num_appended = 0  # tokens put in by the driver (forcing texts), not generated
        self.spliced: dict[int, str] = {}  # step index -> verdict of a step from the cache
        self.lookups: set[int] = set()  # step indexes the step cache was asked for
        self.format = config.format
        tok = engine.tokenizer
        # The rendered prompt: whether its template opened the thinking (DeepSeek-R1 does).
        self.prompt_text = tok.decode(seq.token_ids[: seq.num_prompt_tokens])
        # Room an answer needs: the longest forcing text (closing the thinking, the prefix).
        widest = self.format.force_text("x", "") if self.format.think_end else "\n"
        widest += self.format.answer_prefix
        self.answer_room = len(tok.encode(widest, add_special_tokens=False)) + 2
        self.forced_until = 0  # the forced text's end: step ends inside it do not end the answer
        self._stops: tuple[int, ...] | None = None
        # Claims read as they are written: verify mode `repair` replaces wrong arithmetic
        # values; with fast verdicts, a false claim is rolled back before its step ends.
        repair = config.verify == "repair"
        watching = repair or (config.verify != "off" and config.fast_verdicts)
        # What the problem's own equations fix: a claim on those unknowns alone is decided in
        # decode like arithmetic (repaired, or contradicted with no round trip).
        self.values = problem_values(problem, premises) if watching else None
        self.watch = (
            ClaimWatch(engine, seq, config.max_repairs, repair, self.values) if watching else None
        )
        # What it did to the sequence that no Note says (forced answers, early exits), for a
        # traced job's spans: None (nothing kept) unless the job is traced.
        self.marks: list[tuple[str, dict]] | None = None

    def _mark(self, kind: str, **attrs) -> None:
        if self.marks is not None:
            self.marks.append((kind, attrs))

    @property
    def done(self) -> bool:
        return self.seq.is_finished

    def step_text(self, start: int, end: int) -> str:
        return self.engine.tokenizer.decode(self.seq.token_ids[start:end]).strip()

    def output_text(self, end: int) -> str:
        """The generation up to token position `end`."""
        return self.engine.tokenizer.decode(self.seq.token_ids[self.seq.num_prompt_tokens : end])

    def after_thinking(self, position: int) -> bool:
        """Is the thinking block closed at `position`? (Formats without markers: no block.)"""
        if self.format.think_end is None:
            return True
        return not self.format.in_thinking(self.output_text(position), self.prompt_text)

    def tokens_spent(self) -> int:
        """Tokens generated for this job: kept, discarded by backtracks, and probes."""
        seq = self.seq
        generated = seq.num_output_tokens - self.num_appended + seq.num_discarded_tokens
        return generated + self.reasoner.num_probe_tokens

    def advance(self, now_s: float) -> list[Outward]:
        """Report what the last engine step did; returns the checks and notes it produced."""
        seq, r = self.seq, self.reasoner
        if seq.is_finished:
            self._drop_probes()
            return []
        actions: list[Action] = []
        false_claim = None
        if self.watch is not None and r.phase == "think" and not r.finished:
            made = self._watch()
            if isinstance(made, FalseClaim):
                false_claim = made
            else:
                actions += made
        while len(r.chain) < seq.num_steps and not r.finished:
            start = r.chain[-1].end if r.chain else seq.num_prompt_tokens
            end = seq.step_ends[len(r.chain)]
            text = self.step_text(start, end)
            r.after_thinking = self.after_thinking(start)
            if (verdict := self.spliced.pop(len(r.chain), None)) is not None:
                actions += r.on_cached_step(start, end, text, verdict)
            elif r.phase == "answer" and end <= self.forced_until:
                actions += r.on_unchecked_step(start, end, text)  # inside the forced text
            else:
                new = r.on_step(start, end, text, now_s)
                actions += new
                check = next((a for a in new if isinstance(a, Check)), None)
                if check is not None and r.config.fast_verdicts:
                    decided = self._fast_verdict(check, now_s)
                    if decided is not None:  # the step is rolled back before anything else
                        actions.remove(check)
                        return self._apply(actions + decided)
        # Once the chain has caught up with the step being written, its false claim is rolled
        # back now (nothing when resampling is capped: the step's verdict will say it).
        caught_up = false_claim is not None and false_claim.step == len(r.chain)
        if caught_up and not r.finished and (early := self._early_rollback(false_claim, now_s)):
            return self._apply(actions + early)
        for key, probe in list(self.probes.items()):
            if probe.is_finished and not r.finished:
                del self.probes[key]
                out = self.probe_answers[key] = probe.output_token_ids
                answer = self.probe_value(out)
                mean_p = math.exp(probe.cumulative_logprob / max(1, len(out)))
                actions += r.on_probe(key, answer, mean_p, len(out))
        # A held finish first: a model that ended by itself is not forced to answer again.
        if seq.pending_finish is not None and r.held_finish is None and not r.finished:
            unclosed = self._ended_before_grammar()
            if unclosed:  # its end token cut off: the grammar's answer comes after the thinking
                self._rollback(seq.num_tokens - 1)
            start = seq.step_start
            tail = (start, seq.num_tokens, self.step_text(start, seq.num_tokens))
            r.after_thinking = self.after_thinking(start)
            if unclosed:
                actions += r.on_unclosed_end(tail, now_s)
            else:
                actions += r.on_finish(seq.pending_finish, tail, now_s)
        if not r.finished and seq.pending_finish is None:
            room = self.engine.max_model_len - seq.num_tokens
            full = room <= self.answer_room + r.config.answer_tokens

            def answering() -> bool:
                r.after_thinking = self.after_thinking(seq.step_start)
                return r.is_answer(self.step_text(seq.step_start, seq.num_tokens))

            actions += r.on_tokens(self.tokens_spent(), answering, out_of_room=full)
        if not r.finished and r.verifying:
            actions += r.on_tick(now_s)
        return self._apply(actions)

    def _ended_before_grammar(self) -> bool:
        """Did the model end by itself (not cut by its token limit) while its answer's grammar
        still waited for the thinking to close? Its answer would be lost (a tool_choice
        `required` with no call, no JSON at all) unless the thinking is closed for it."""
        seq = self.seq
        waiting = seq.params.guided is not None and (seq.guide is None or not seq.guide.active)
        thinking = self.reasoner.phase == "think" and self.format.think_end is not None
        return waiting and thinking and seq.pending_finish == "stop"

    def wants_next_step(self) -> int | None:
        """The index of the step about to be generated, when a cached one could replace it:
        the sequence sits on a step boundary, thinking, not asked before (strict: with every
        verdict in; async: a late contradiction rolls a spliced step back like any other)."""
        seq, r = self.seq, self.reasoner
        at_boundary = bool(seq.step_ends) and seq.step_ends[-1] == seq.num_tokens
        index = len(r.chain)
        if (
            seq.is_finished
            or r.finished
            or r.phase != "think"
            or (r.pending and r.config.verify == "strict")
            or index != seq.num_steps
            or not at_boundary
            or index in self.lookups
        ):
            return None
        self.lookups.add(index)
        return index

    def splice_step(self, index: int, text: str, verdict: str) -> bool:
        """Put a cached verified step (and the delimiter) in instead of generating it; False
        when there is no room for it."""
        delimiter = self.engine.step_detector.delimiter if self.engine.step_detector else "\n"
        ids = self.engine.tokenizer.encode(text + delimiter, add_special_tokens=False)
        room = self.engine.max_model_len - self.seq.num_tokens
        if len(ids) + self.answer_room + self.reasoner.config.answer_tokens >= room:
            return False  # no room for it and an answer after it: the model writes its own
        self.engine.append_tokens(self.seq.request_id, ids)
        self.num_appended += len(ids)
        self.spliced[index] = verdict
        return True

    def flush(self) -> list[Outward]:
        """After the sequence finished on its own (verify off): its last steps, unchecked."""
        seq, r = self.seq, self.reasoner
        self._drop_probes()
        notes: list[Action] = []
        while len(r.chain) < seq.num_steps:
            start = r.chain[-1].end if r.chain else seq.num_prompt_tokens
            end = seq.step_ends[len(r.chain)]
            notes += r.on_unchecked_step(start, end, self.step_text(start, end))
        start = r.chain[-1].end if r.chain else seq.num_prompt_tokens
        if start < seq.num_tokens and (text := self.step_text(start, seq.num_tokens)):
            notes += r.on_unchecked_step(start, seq.num_tokens, text)
        return [n for n in notes if isinstance(n, Note)]

    def verdict(
        self, key: str, verdict: str, detail: str, now_s: float, claims=()
    ) -> list[Outward]:
        if self.seq.is_finished:
            return []
        return self._apply(self.reasoner.on_verdict(key, verdict, detail, now_s, claims))

    def _apply(self, actions: list[Action]) -> list[Outward]:
        engine, seq, rid = self.engine, self.seq, self.seq.request_id
        out: list[Outward] = []
        for a in actions:
            if seq.is_finished:
                if isinstance(a, Check | Note):
                    out.append(a)
                continue
            if isinstance(a, Rollback):
                position = a.position
                if a.claim_char is not None:  # back to the contradicted claim, not its step
                    position = self._claim_position(a.position, a.claim_char)
                self._rollback(position, seed=a.seed)
            elif isinstance(a, Resume):
                engine.resume(rid)
            elif isinstance(a, Pause):
                engine.pause(rid)
            elif isinstance(a, Finish):
                engine.finish(rid, a.reason)
            elif isinstance(a, ForceAnswer | ExitWith):
                if isinstance(a, ForceAnswer):
                    cut = self._force_answer(a.position)
                else:
                    cut = self._exit_with(a.position, a.key)
                if cut and not any(isinstance(o, Note) and o.kind == "backtrack" for o in out):
                    # Text already streamed goes: the stream is told, as after a backtrack.
                    out.append(self._cut_note(cut))
            elif isinstance(a, Probe):
                self._start_probe(a.key, a.position)
            else:
                out.append(a)
        if seq.is_finished:
            self._drop_probes()
        return out

    def _fast_verdict(self, check: Check, now_s: float) -> list[Action] | None:
        """A step with a false claim that has no unknowns (or only unknowns the problem fixes) is
        contradicted here, with no round trip to the checker (pipeline/verify/fast.py); None:
        the checker decides."""
        v = fast_verdict(check.text, values=self.values)
        if v is None:
            return None
        self.reasoner.num_fast_verdicts += 1
        detail = f"{v.detail} (decided in decode)"
        return self.reasoner.on_verdict(check.key, v.verdict, detail, now_s, v.claims)

    def _rollback(self, position: int, seed: int | None = None) -> None:
        self.engine.rollback(self.seq.request_id, position, seed=seed)
        if self.watch is not None:
            self.watch.rolled_back(position)

    def _claim_position(self, start: int, char: int) -> int:
        """The token position where the character `char` of the step starting at token `start`
        begins (the step's text as checked: stripped); the step's start when it cannot say."""
        ids = self.seq.token_ids[: self.seq.num_tokens]
        raw = self.engine.tokenizer.decode(ids[start:])
        lead = len(raw) - len(raw.lstrip())
        found = token_at(self.engine.tokenizer.decode, ids, start, lead + char, raw)
        return start if found is None else found

    def _watch(self) -> list[Action] | FalseClaim:
        """A wrong value just written, replaced by the right one (verify mode `repair`); or a
        false claim closed in the step being written, for `_early_rollback`."""
        r = self.reasoner
        first = r.chain[-1].end if r.chain else self.seq.num_prompt_tokens
        assert self.watch is not None
        if r.calls_begun():  # tool calls from here on: no claims to read
            return []
        made = self.watch.scan(first, len(r.chain))
        if made is None or isinstance(made, FalseClaim):
            return made or []
        mark, appended = made
        self.num_appended += appended
        # A finish the engine was holding (the model ended right after the value) is gone
        # with the rollback: the sequence samples again from the repaired value.
        self.engine.resume(self.seq.request_id)
        r.num_repairs += 1
        detail = f"{mark.old} -> {mark.new}: {mark.claim}"
        self._mark("repair", old=mark.old, new=mark.new, at=mark.position)
        return [Note("repair", mark.step, mark.claim, None, detail)]

    def _early_rollback(self, found: FalseClaim, now_s: float) -> list[Action]:
        """The step being written states a false claim with no unknowns (or only unknowns the
        problem fixes): it is contradicted now, mid-step, and rolled back (the machine's
        backtrack: to the claim's start when its own computation is wrong)."""
        lead = len(found.text) - len(found.text.lstrip())
        a, b = found.claim.span
        claim = replace(found.claim, span=(a - lead, b - lead))
        verdict = contradicted((claim,), self.values)
        assert verdict is not None
        self.reasoner.num_fast_verdicts += 1
        detail = f"{verdict.detail} (decided in decode, mid-step)"
        end = self.seq.num_tokens
        text = found.text.strip()
        return self.reasoner.on_false_claim(found.start, end, text, detail, verdict.claims, now_s)

    def _force_answer(self, position: int | None) -> str:
        """s1's budget forcing, in the model's format: close the thinking if it is open (cut
        back to `position` first, if given; with none given, to the chain's end where the
        thinking cannot close in place: `closes_in_place`), write the answer prefix, decode
        the answer greedily. Returns the text cut (stripped; "" when none)."""
        seq, cfg = self.seq, self.reasoner.config
        cut = ""
        if position is None and not self._closes_in_place():
            position = self._chain_end()
        if position is None:
            position = seq.num_tokens
        elif position < seq.num_tokens:
            cut = self.step_text(position, seq.num_tokens)
            self._rollback(position)
        text = self.format.force_text(self.output_text(seq.num_tokens), self.prompt_text)
        room = cfg.answer_tokens
        if seq.params.guided is not None:  # the grammar writes the answer: close the thinking
            text = handover(text, seq.params.guided, seq.guide)
            room = max(room, GUIDED_ANSWER_TOKENS)
        ids = self.engine.tokenizer.encode(text, add_special_tokens=False) if text else []
        if seq.num_tokens + len(ids) + 1 >= self.engine.max_model_len:
            # No room left for even the cue (a prompt that fills the context): end here.
            self.reasoner.finished = True
            self.engine.finish(seq.request_id, "length")
            return cut
        self.engine.append_tokens(seq.request_id, ids)
        self.num_appended += len(ids)
        self.forced_until = seq.num_tokens
        self._mark("forced_answer", reason=self.reasoner.stop_reason or "budget", at=position)
        # The answer is decoded greedily, within a few tokens of what has been spent.
        spent = seq.num_output_tokens + seq.num_discarded_tokens
        self.engine.update_params(
            seq.request_id,
            temperature=0.0,
            max_tokens=spent + room,
            pause_on_step_end=False,
        )
        return cut

    def _chain_end(self) -> int:
        r = self.reasoner
        return r.chain[-1].end if r.chain else self.seq.num_prompt_tokens

    def _closes_in_place(self) -> bool:
        """May an unverified forced answer close the thinking where the sequence stands?"""
        unfinished = self.step_text(self._chain_end(), self.seq.num_tokens)
        return not self.reasoner.calls_begun() and closes_in_place(unfinished)

    def _cut_note(self, text: str) -> Note:
        """The backtrack event (no verdict: a cut) for the unfinished step a forced answer or
        an early exit cut: the answer follows the chain before it."""
        n = len(self.reasoner.chain)
        after = f"step {n - 1}" if n else "the prompt"
        cause = CUT_CAUSES.get(self.reasoner.stop_reason or "budget", self.reasoner.stop_reason)
        why = f"{cause}: the unfinished step is cut; the answer follows {after}"
        return Note("backtrack", n, text, None, why)

    def _start_probe(self, key: str, position: int) -> None:
        """Dynasor's probe: the format's probe text after the thinking so far, a few greedy
        tokens, read by the format's probe answer finder."""
        seq, engine = self.seq, self.engine
        cue = engine.tokenizer.encode(self.format.probe_text, add_special_tokens=False)
        ids = seq.token_ids[:position] + cue
        if len(ids) + 1 >= engine.max_model_len:
            return
        params = SamplingParams(
            temperature=0.0,
            max_tokens=min(self.reasoner.config.answer_tokens, self.format.answer_max_tokens),
            stop_token_ids=self._probe_stops(),
        )
        # Shares the sequence's KV blocks through the prefix cache: only the cue is new.
        # Ahead of waiting jobs: a probe that waits for a slot is usually dropped unrun.
        probe = Request(f"{seq.request_id}/{key}", ids, params, priority=-1)
        self.probes[key] = engine.add(probe)

    def _probe_stops(self) -> tuple[int, ...]:
        """A probe ends where its answer must have ended: the box's `}`, else a line end."""
        stop = "}" if self.format.probe_text.rstrip().endswith("{") else "\n"
        if self._stops is None:
            texts = self.engine.tokenizer.token_texts()
            self._stops = tuple(i for i, t in enumerate(texts) if stop in t)
        return self._stops

    def probe_value(self, output_ids: list[int]) -> str:
        """The answer a probe's tokens give (the format's probe answer finder), or ""."""
        text = self.engine.tokenizer.decode(output_ids)
        return self.format.probe_answer(text) or ""

    def _exit_with(self, position: int, key: str) -> str:
        """Finish with the probed answer after the chain up to `position`; returns the text
        cut (stripped; "" when none)."""
        seq, engine = self.seq, self.engine
        value = self.probe_value(self.probe_answers.pop(key, []))
        cut = ""
        if position < seq.num_tokens:
            cut = self.step_text(position, seq.num_tokens)
            self._rollback(position)
        # The answer goes into the text in the format's words: the thinking closed, the answer
        # prefix, the probed value. No KV is needed for it.
        text = exit_text(self.format, self.output_text(seq.num_tokens), self.prompt_text, value)
        ids = engine.tokenizer.encode(text, add_special_tokens=False)
        self.num_appended += len(ids)
        engine.finish_with(seq.request_id, ids, "early_exit")
        self._mark("early_exit", answer=value, at=position)
        return cut

    def _drop_probes(self) -> None:
        self.probe_answers.clear()
        for probe in self.probes.values():
            # A probe cut short by the job's end was still paid for.
            self.reasoner.num_probe_tokens += probe.num_output_tokens
            if not probe.is_finished:
                self.engine.abort(probe.request_id)
        self.probes.clear()


def closes_in_place(unfinished: str) -> bool:
    """Can a forced answer's text follow the step being written (`unfinished`), cutting
    nothing? Not once a tool call has opened in it: the text would land in the call's
    arguments, so the step is cut. (After a closed thinking the forcing text is the answer
    prefix alone, after the answer so far: what was streamed stays the response's.)"""
    return before_calls(unfinished) == unfinished


def exit_text(fmt, text: str, prompt: str, value: str) -> str:
    """An early exit's answer, written the way a forced answer is: `text` closed, the prefix,
    the value (and the box's brace, or the line's end)."""
    forced = fmt.force_text(text, prompt)
    if forced.endswith("{"):
        return f"{forced}{value}}}."
    sep = "" if forced.endswith((" ", "\n")) else " "
    end = "\n" if fmt.step_delimiter == "\n" else "."
    return f"{forced}{sep}{value}{end}"
