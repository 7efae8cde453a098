"""The vLLM backend: the native Engine's step-wise API on a vLLM OpenAI server.

Each sequence keeps the native `Sequence` bookkeeping here (token ids, step ends, held finish,
discarded tokens), so the reasoning driver cannot tell the engines apart. vLLM generates one
step at a time: a sequence that may run is submitted as a streamed completion of its whole
token list, stopping at the step delimiter's tokens; vLLM's prefix cache (32-token blocks)
makes every resubmission a cache hit up to the last full block. Control is by resubmission:

* pause: the stream is closed and nothing is resubmitted until `resume`;
* rollback (backtrack): the tokens are cut here and the prefix is resubmitted with a new seed;
* budget forcing: the answer cue is appended here, the next submission starts after it;
* early-exit probe: a second sequence on prefix + cue (a prefix-cache hit, too);
* structured output: the thinking's submissions run free, the answer's carries the grammar
  as vLLM's `structured_outputs` (vllm/structured.py).

The sampling seed of a submission is derived from the sequence's seed and its length, so a
sequence rolled back to a step start with the same seed resamples the same step.
No KV crosses processes: `can_export_kv` is False, prefill hands off without KV, and decode
re-prefills from token ids, which on a shared server is a prefix-cache hit.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from pathlib import Path

from pipeline.config import EngineConfig
from pipeline.engine.base import EngineStats, StepEngine
from pipeline.engine.model_config import ModelConfig
from pipeline.engine.outputs import Request, TokenOutput
from pipeline.engine.sequence import Sequence, SequenceStatus
from pipeline.engine.tokenizer import StepBoundaryDetector, Tokenizer
from pipeline.errors import InvalidRequestError
from pipeline.formats import format_for
from pipeline.vllm.server import (
    CompletionStreams,
    VLLMServer,
    VLLMServerConfig,
    served_model,
)
from pipeline.vllm.structured import GrammarStart

log = logging.getLogger(__name__)
_MASK63 = (1 << 63) - 1
_LIVE = (SequenceStatus.WAITING, SequenceStatus.RUNNING)


def submission_seed(seed: int, num_tokens: int) -> int:
    """vLLM's per-request seed for a step that starts after `num_tokens` tokens (splitmix64)."""
    x = (seed * 0x9E3779B97F4A7C15 + num_tokens + 1) & ((1 << 64) - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (x ^ (x >> 31)) & _MASK63


class VLLMEngine(StepEngine):
    """The Engine API (add / step / pause / resume / rollback / append_tokens / finish / abort)
    over a vLLM server. `url`: a running one; empty: start one and own it."""

    can_export_kv = False
    # Passed through as `structured_outputs` once the thinking has ended; the server needs its
    # tokenizer and the guidance backend (VLLMServerConfig.structured_outputs; the stack's and
    # this engine's own servers start so).
    supports_guided = True

    def __init__(
        self,
        config: EngineConfig,
        url: str = "",
        streams=None,
        log_path=None,
        step_stops: bool = True,
    ) -> None:
        self.config = config
        # True: every submission ends at the step delimiter (one request per step). False: a
        # submission runs until a finish and is only cut by pause / rollback / appended tokens
        # (bench/stepwise_vs_vllm.py measures both).
        self.step_stops = step_stops
        path = Path(config.model)
        self.model_config = mc = ModelConfig.from_dir(path, native=False)
        self.tokenizer = Tokenizer(path)
        self.eos_token_ids = frozenset(set(mc.eos_token_ids) | self.tokenizer.eos_token_ids)
        self.reasoning_format = format_for(path, config.reasoning_format)
        self.tokenizer.keep_special(self.reasoning_format.marker_texts())  # the split reads them
        self.step_detector = StepBoundaryDetector(
            self.tokenizer.token_texts(),
            config.step_delimiter or self.reasoning_format.step_delimiter,
        )
        self.server: VLLMServer | None = None
        limit = mc.max_model_len(windowed=False)  # vLLM runs sliding windows itself
        if streams is None:  # a real server (tests of the logic pass a fake `streams`)
            if not url:
                dtype = "float32" if config.dtype == "auto" else config.dtype
                server_config = VLLMServerConfig(
                    str(path), dtype=dtype, max_num_seqs=config.max_num_seqs,
                    max_model_len=config.max_model_len, seed=config.seed,
                    structured_outputs=True,
                )  # fmt: skip
                self.server = VLLMServer(server_config, log_path).start()
                url = self.server.url
            self.model_name, served_len = served_model(url)
            limit = min(limit, served_len or limit)
            streams = CompletionStreams(url)
        else:
            self.model_name = "stepwise"
        self.url = url
        self.streams = streams
        self.max_model_len = min(config.max_model_len or limit, limit)
        self.seqs: dict[str, Sequence] = {}
        self.live: dict[str, str] = {}  # request id -> its submission in flight
        self.owner: dict[str, str] = {}  # submission -> request id
        self.buffered: dict[str, deque[tuple[int, float]]] = {}  # arrived, not handed out yet
        self.streamed: set[str] = set()  # request ids whose submission has sent its last token
        self.stats = EngineStats()
        self.num_submissions = 0
        self.num_resubmitted_tokens = 0  # prompt tokens sent again (prefix-cache hits, mostly)
        self._seed_rng = random.Random(config.seed)
        self._arrivals = 0

    # -- requests ---------------------------------------------------------------------------

    def add(self, request: Request) -> Sequence:
        self._check_prompt(request, self.model_config.vocab_size)
        seq = self._make_sequence(request)
        if request.params.guided is not None:  # the driver reads `guide.active`, as natively
            texts = self.tokenizer.token_texts()
            seq.guide = GrammarStart(request.params.guided, texts, seq.num_prompt_tokens)
        self.seqs[seq.request_id] = seq
        return seq

    @property
    def has_schedulable(self) -> bool:
        return any(s.status in _LIVE for s in self.seqs.values())

    def kv_usage(self) -> tuple[int, int]:
        """(used, total) KV blocks: vLLM's pool is the server's, not seen from here."""
        return 0, 0

    # -- step-aware control (vLLM: by resubmission) -------------------------------------------

    def _drop_submission(self, request_id: str) -> None:
        self.buffered.pop(request_id, None)
        self.streamed.discard(request_id)
        if (sub := self.live.pop(request_id, None)) is not None:
            self.owner.pop(sub, None)
            self.streams.cancel(sub)

    def pause(self, request_id: str) -> None:
        seq = self._get(request_id)
        self._drop_submission(request_id)
        seq.status = SequenceStatus.PAUSED

    def resume(self, request_id: str) -> None:
        seq = self._get(request_id)
        if seq.status is SequenceStatus.PAUSED:
            seq.status = SequenceStatus.RUNNING

    def rollback(self, request_id: str, num_tokens: int, seed: int | None = None) -> None:
        seq = self._get(request_id)
        if not seq.num_prompt_tokens <= num_tokens <= seq.num_tokens:
            raise InvalidRequestError(
                f"rollback position {num_tokens} is outside "
                f"[{seq.num_prompt_tokens}, {seq.num_tokens}]"
            )
        self._drop_submission(request_id)
        seq.num_discarded_tokens += seq.num_tokens - num_tokens
        seq.truncate(num_tokens)
        seq.pending_finish = None
        if seed is not None:
            seq.seed = seed
        if seq.guide is not None:
            seq.guide.rescan(seq.output_token_ids)

    def append_tokens(self, request_id: str, token_ids: list[int]) -> None:
        seq = self._get(request_id)
        if any(not 0 <= t < self.model_config.vocab_size for t in token_ids):
            raise InvalidRequestError(f"token ids must lie in [0, {self.model_config.vocab_size})")
        if seq.num_tokens + len(token_ids) >= self.max_model_len:
            raise InvalidRequestError("appending these tokens would fill the context")
        self._drop_submission(request_id)  # what is in flight continues the old tokens
        seq.extend(token_ids, self.step_detector)
        seq.pending_finish = None
        if seq.guide is not None:
            seq.guide.rescan(seq.output_token_ids)  # forced text may close the thinking

    def finish(self, request_id: str, reason: str | None = None) -> Sequence:
        seq = self._get(request_id)
        self._end(seq, reason or seq.pending_finish or "stop")
        seq.pending_finish = None
        return seq

    def abort(self, request_id: str) -> None:
        if (seq := self.seqs.get(request_id)) is not None:
            self._end(seq, "abort")

    def _end(self, seq: Sequence, reason: str) -> None:
        self._drop_submission(seq.request_id)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        del self.seqs[seq.request_id]

    # -- the step -----------------------------------------------------------------------------

    def step(self, timeout_s: float = 0.2) -> list[TokenOutput]:
        """Submit every runnable sequence that has no step in flight, take in the tokens that
        arrived (waiting up to `timeout_s` if none is buffered), and hand out at most one token
        per sequence, as the native engine does: the caller acts on each token before the next
        (pause after the first, a held finish, a step end) whatever vLLM sent at once."""
        t0 = time.perf_counter()
        for seq in list(self.seqs.values()):
            if seq.status in _LIVE and seq.request_id not in self.live:
                self._submit(seq)
        wait = timeout_s if self.live and not self.buffered else 0.0
        for d in self.streams.poll(wait):
            rid = self.owner.get(d.sub_id)
            seq = self.seqs.get(rid) if rid is not None else None
            if seq is None or self.live.get(rid) != d.sub_id:
                continue  # a step abandoned by pause / rollback / finish
            if d.error is not None:
                log.error("%s: vLLM failed: %s", rid, d.error)
                self._end(seq, "error")
                continue
            self.buffered.setdefault(rid, deque()).extend(zip(d.token_ids, d.logprobs, strict=True))
            if d.done:
                self.streamed.add(rid)
        outputs: list[TokenOutput] = []
        for rid, tokens in list(self.buffered.items()):
            if tokens:
                outputs.append(self._append_token(self.seqs[rid], *tokens.popleft()))
            if not tokens and self.buffered.get(rid) is tokens:
                del self.buffered[rid]
                if rid in self.streamed:  # the step ended (delimiter, EOS, its token limit)
                    self.streamed.discard(rid)
                    self.owner.pop(self.live.pop(rid), None)  # resubmitted next time
        self.stats.num_steps += 1
        self.stats.num_generated_tokens += len(outputs)
        self.stats.step_s += time.perf_counter() - t0
        return outputs

    def _remaining(self, seq: Sequence) -> int:
        p = seq.params
        spent = seq.num_output_tokens + (seq.num_discarded_tokens if p.charge_rollbacks else 0)
        return min(p.max_tokens - spent, self.max_model_len - seq.num_tokens)

    def _submit(self, seq: Sequence) -> None:
        """Send the sequence's next step to vLLM; a sequence with no room left ends instead
        (an appended answer cue can use up the last of the budget)."""
        n = self._remaining(seq)
        if n <= 0:
            if seq.params.pause_on_finish:
                seq.pending_finish = "length"
                seq.status = SequenceStatus.PAUSED
            else:
                self._end(seq, "length")
            return
        p = seq.params
        grammar: GrammarStart | None = seq.guide
        held = grammar is not None and grammar.active
        if held and seq.num_tokens > grammar.at:
            # vLLM cannot resume a grammar part-way (a rollback into the answer): an error,
            # never an answer that goes on unchecked.
            log.error("%s: a grammar-held answer cut part-way cannot resume", seq.request_id)
            self._end(seq, "error")
            return
        stop = set(p.stop_token_ids)
        if (self.step_stops or p.pause_on_step_end) and not held:  # the answer: one submission
            stop |= self.step_detector.delimiter_tokens
        if not p.ignore_eos:
            stop |= self.eos_token_ids
        self.num_submissions += 1
        sub = f"{seq.request_id}#{self.num_submissions}"
        body = {
            "model": self.model_name,
            "prompt": seq.token_ids,
            "max_tokens": n,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "top_k": p.top_k,
            "min_p": p.min_p,
            "seed": submission_seed(seq.seed, seq.num_tokens),
            "stop_token_ids": sorted(stop),
            "ignore_eos": True,  # EOS is in stop_token_ids unless the request ignores it
            "skip_special_tokens": False,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "stream": True,
        }
        if held:
            body["structured_outputs"] = grammar.field
        self.num_resubmitted_tokens += seq.num_tokens if seq.num_output_tokens else 0
        seq.status = SequenceStatus.RUNNING
        self.live[seq.request_id] = sub
        self.owner[sub] = seq.request_id
        self.streams.submit(sub, body)

    def _append_token(self, seq: Sequence, token: int, logprob: float) -> TokenOutput:
        detector, eos = self.step_detector, self.eos_token_ids
        ends_step, stops = seq.append_sampled(token, logprob, detector, eos)
        p = seq.params
        reason = None
        if stops:
            reason = "stop"
        elif self._remaining(seq) <= 0:
            reason = "length"
        grammar: GrammarStart | None = seq.guide
        if grammar is not None and grammar.feed(token, seq.num_tokens) and reason is None:
            # The thinking ended: what vLLM sent after the marker ran free of the grammar.
            self._drop_submission(seq.request_id)
        held = grammar is not None and grammar.active
        if reason is None and ends_step and p.pause_on_step_end and not held:
            self.pause(seq.request_id)
        if reason is None:
            return self._output(seq, token, logprob, ends_step, False, None)
        return self._stop(seq, reason, ends_step, token, logprob)

    def _stop(
        self, seq: Sequence, reason: str, ends_step: bool, token: int, logprob: float
    ) -> TokenOutput:
        """A finish: held (paused, `pending_finish`) or final."""
        if seq.params.pause_on_finish:
            seq.pending_finish = reason
            self.pause(seq.request_id)
            return self._output(seq, token, logprob, ends_step, False, reason)
        self._end(seq, reason)
        return self._output(seq, token, logprob, ends_step, True, reason)

    def _output(self, seq, token, logprob, ends_step, finished, reason) -> TokenOutput:
        paused = seq.status is SequenceStatus.PAUSED
        position = seq.num_tokens - 1
        # vLLM returns no entropy: 0.0 (the driver does not read it).
        return TokenOutput(
            seq.request_id, token, position, logprob, 0.0, ends_step, seq.num_steps,
            finished, reason, paused,
        )  # fmt: skip

    # -- batch use ----------------------------------------------------------------------------

    def close(self) -> None:
        for rid in list(self.live):
            self._drop_submission(rid)
        self.streams.close()
        if self.server is not None:
            self.server.stop()
            self.server = None
