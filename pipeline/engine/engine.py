"""Engine: add / step / pause / resume / rollback / abort / export_kv / import_kv / generate.

One engine step = schedule, run one forward over the flattened batch, sample the rows that
reached their last token, and update every sequence. Callers drive it one step at a time (the
decode worker, the eval runner) or use `generate` for a batch.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch

from pipeline.config import EngineConfig
from pipeline.engine.base import EngineStats, StepEngine
from pipeline.engine.block_manager import BlockManager
from pipeline.engine.draft import DraftModelProposer
from pipeline.engine.guided import GuideSet
from pipeline.engine.kv_cache import KVCache
from pipeline.engine.loader import load_model
from pipeline.engine.model_config import ModelConfig
from pipeline.engine.model_runner import ModelRunner
from pipeline.engine.outputs import (
    KVBlocks,
    KVExport,
    KVStorage,
    PinnedKV,
    Request,
    TokenOutput,
)
from pipeline.engine.proposal_sizing import Candidate, ProposalSizer
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.scheduler import Scheduler
from pipeline.engine.sequence import Sequence
from pipeline.engine.speculative import Proposer, num_accepted
from pipeline.engine.tokenizer import StepBoundaryDetector, Tokenizer
from pipeline.errors import (
    InvalidRequestError,
    KVPoolExhaustedError,
    ModelLoadError,
)
from pipeline.formats import format_for
from pipeline.kernels.cpu_linear import prepack_linears
from pipeline.models.resolve import resolve_model

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


class Engine(StepEngine):
    """A continuous-batching engine over one model, driven one step at a time."""

    can_export_kv = True  # prefill hands the KV to decode (pipeline/transfer/)
    supports_guided = True  # guided.py's masks in the model runner

    def __init__(self, config: EngineConfig, kv_storage: KVStorage | None = None):
        self.config = config
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        path = Path(config.model)
        self.model_config = mc = ModelConfig.from_dir(path)
        self.max_model_len = mc.max_model_len(config.max_model_len)
        model = load_model(path, self.dtype, self.device, self.max_model_len)
        if config.cpu_prepack and self.device.type == "cpu":
            prepack_linears(model)
            model.fuse_cpu_stack()
        self.tokenizer = Tokenizer(path) if (path / "tokenizer.json").is_file() else None
        eos = set(mc.eos_token_ids)
        if self.tokenizer is not None:
            eos |= self.tokenizer.eos_token_ids
        self.eos_token_ids = frozenset(eos)
        self.reasoning_format = format_for(path, config.reasoning_format)
        if self.tokenizer is not None:  # decoded text keeps the markers the format reads
            self.tokenizer.keep_special(self.reasoning_format.marker_texts())
        delimiter = config.step_delimiter or self.reasoning_format.step_delimiter
        self.step_detector = (
            StepBoundaryDetector(self.tokenizer.token_texts(), delimiter)
            if self.tokenizer is not None
            else None
        )

        per_block = KVCache.bytes_per_block(
            mc.num_hidden_layers, config.block_size, mc.num_key_value_heads, mc.head_dim, self.dtype
        )
        num_blocks = config.num_kv_blocks or max(
            2, int(config.kv_cache_memory_gb * 2**30 // per_block)
        )
        storage = generations = None
        if kv_storage is not None:
            numel = num_blocks * per_block // self.dtype.itemsize
            storage, generations = kv_storage(num_blocks, numel, self.dtype)
        self.kv_cache = KVCache(
            mc.num_hidden_layers,
            num_blocks,
            config.block_size,
            mc.num_key_value_heads,
            mc.head_dim,
            self.dtype,
            self.device,
            storage,
        )
        self.block_manager = BlockManager(
            num_blocks, config.block_size, config.enable_prefix_caching, generations
        )
        self.scheduler = Scheduler(
            self.block_manager, config.max_num_seqs, config.max_num_batched_tokens
        )
        self.runner = ModelRunner(model, self.kv_cache, config.block_size, self.device)
        self.runner.capture_cuda_graphs(config.max_num_seqs, self.max_model_len)  # CUDA only
        if self.tokenizer is not None:
            self.runner.guides = GuideSet(self.tokenizer.hf, self.tokenizer.token_texts())
        self.seqs: dict[str, Sequence] = {}
        self.stats = EngineStats()
        spec = config.speculative
        self.proposer = None
        self.sizer: ProposalSizer | None = None
        if spec is not None:
            draft = None
            if spec.method == "draft_model":
                assert spec.model is not None  # SpeculativeConfig holds it
                try:
                    draft_path = resolve_model(spec.model)
                except ModelLoadError as exc:
                    raise ModelLoadError(f"draft model: {exc}") from exc
                draft = DraftModelProposer(draft_path, mc.vocab_size, self.dtype, self.device)
            self.proposer = Proposer(spec, draft)
            self.sizer = ProposalSizer() if spec.size_by_cost else None
        self._seed_rng = random.Random(config.seed)
        self._arrivals = 0

    # -- requests ---------------------------------------------------------------------------

    def _new_sequence(self, request: Request) -> Sequence:
        self._check_prompt(request, self.model_config.vocab_size)
        p, bm = request.params, self.block_manager
        need = bm.num_blocks_for(
            min(len(request.prompt_token_ids) + p.max_tokens, self.max_model_len)
        )
        if need > bm.num_blocks:
            raise InvalidRequestError(
                f"request needs {need} KV blocks but the pool has {bm.num_blocks}"
            )
        return self._make_sequence(request)

    def add(self, request: Request) -> Sequence:
        """Queue a request. Returns its live Sequence (token ids grow as it decodes)."""
        seq = self._new_sequence(request)
        self.seqs[seq.request_id] = seq
        self.scheduler.add(seq)
        return seq

    @property
    def has_schedulable(self) -> bool:
        return self.scheduler.has_schedulable

    def kv_usage(self) -> tuple[int, int]:
        """(used, total) KV blocks."""
        bm = self.block_manager
        return bm.num_blocks - bm.num_free_blocks, bm.num_blocks

    def close(self) -> None:
        """Nothing to release (the vLLM backend stops its server here)."""

    # -- step-aware control -----------------------------------------------------------------

    def pause(self, request_id: str) -> None:
        """Take the sequence out of the batch; it keeps its KV blocks."""
        seq = self._get(request_id)
        seq.spec_buffer.clear()  # verified ahead, recomputed on resume: no state held paused
        self.scheduler.pause(seq)

    def resume(self, request_id: str) -> None:
        self.scheduler.resume(self._get(request_id))

    def rollback(self, request_id: str, num_tokens: int, seed: int | None = None) -> None:
        """Forget every token from position `num_tokens` on; decoding continues from there.

        A new `seed` makes the resampled continuation differ; the same seed reproduces it.
        """
        seq = self._get(request_id)
        if not seq.num_prompt_tokens <= num_tokens <= seq.num_tokens:
            raise InvalidRequestError(
                f"rollback position {num_tokens} is outside "
                f"[{seq.num_prompt_tokens}, {seq.num_tokens}]"
            )
        seq.num_discarded_tokens += seq.num_tokens - num_tokens
        self.block_manager.truncate(seq, num_tokens)
        seq.pending_finish = None
        seq.spec_buffer.clear()
        if self.proposer is not None:
            self.proposer.rewind(seq)
        if seed is not None:
            seq.seed = seed

    def append_tokens(self, request_id: str, token_ids: list[int]) -> None:
        """Put tokens the caller chose after the sequence's last one (an answer cue, say): their
        KV is computed with the next step, and sampling continues after them."""
        seq = self._get(request_id)
        vocab = self.model_config.vocab_size
        if any(not 0 <= t < vocab for t in token_ids):
            raise InvalidRequestError(f"token ids must lie in [0, {vocab})")
        if seq.num_tokens + len(token_ids) >= self.max_model_len:
            raise InvalidRequestError("appending these tokens would fill the context")
        seq.extend(token_ids, self.step_detector)
        seq.pending_finish = None
        seq.spec_buffer.clear()

    def update_params(self, request_id: str, **changes: object) -> None:
        super().update_params(request_id, **changes)
        self._get(request_id).spec_buffer.clear()  # verified under the old params

    def finish(self, request_id: str, reason: str | None = None) -> Sequence:
        """End a sequence now (a held finish, or early): its blocks are freed, its tokens kept.

        `reason` defaults to the held finish's reason, else "stop"."""
        seq = self._get(request_id)
        del self.seqs[request_id]
        self.scheduler.finish(seq, reason or seq.pending_finish or "stop")
        seq.pending_finish = None
        if self.proposer is not None:
            self.proposer.remember(seq)
        return seq

    def abort(self, request_id: str) -> None:
        seq = self.seqs.pop(request_id, None)
        if seq is not None:
            self.scheduler.finish(seq, "abort")
            if self.proposer is not None:
                self.proposer.forget(seq)

    def export_shape(self, request_id: str) -> tuple[int, ...]:
        """Shape of the buffer `export_kv(request_id, out=...)` fills (whole blocks)."""
        return self.kv_cache.export_shape(self._get(request_id).num_computed_tokens)

    def export_kv(self, request_id: str, out: torch.Tensor | None = None) -> KVExport:
        """Copy out the sequence's computed K/V for a handoff, into `out` if given (shape
        `export_shape(request_id)`, e.g. shared memory). `KVExport.kv` views its tokens."""
        seq = self._get(request_id)
        kv = self.kv_cache.export(seq.block_table, seq.num_computed_tokens, out)
        return KVExport(seq.request_id, list(seq.token_ids), seq.num_prompt_tokens, kv, seq.seed)

    def pin_kv(self, request_id: str) -> PinnedKV:
        """Hold the sequence's computed blocks past its end, for a reader of this engine's
        pool (a handoff in place); `unpin_kv` lets them go. Their generations name them."""
        seq = self._get(request_id)
        n = seq.num_computed_tokens
        blocks = seq.block_table[: self.block_manager.num_blocks_for(n)]
        self.block_manager.pin(blocks)
        gens = self.block_manager.generations
        return PinnedKV(list(blocks), [int(gens[b]) for b in blocks], n)

    def unpin_kv(self, blocks: list[int]) -> None:
        self.block_manager.unpin(blocks)

    def import_kv(self, export: KVExport, params: SamplingParams) -> Sequence:
        """Continue a sequence from another engine's export without recomputing its KV."""
        n = export.num_kv_tokens
        if not 0 < n < len(export.token_ids):
            raise InvalidRequestError("an export must cover fewer tokens than the sequence has")
        mc = self.model_config
        if isinstance(export.kv, KVBlocks):
            src = export.kv
            expected = (mc.num_hidden_layers, 2, mc.num_key_value_heads, self.kv_cache.block_size)
            got = tuple(src.pool.shape[:3]) + (src.pool.shape[4],)
            if got != expected or src.pool.shape[5] != mc.head_dim:
                raise InvalidRequestError(f"KV pool shape {tuple(src.pool.shape)} != {expected}")
            if len(src.blocks) != self.block_manager.num_blocks_for(n):
                raise InvalidRequestError(f"{len(src.blocks)} blocks for {n} tokens")
        else:
            expected = (mc.num_hidden_layers, 2, mc.num_key_value_heads, n, mc.head_dim)
            if tuple(export.kv.shape) != expected:
                raise InvalidRequestError(f"KV shape {tuple(export.kv.shape)} != {expected}")
        prompt = export.token_ids[: export.num_prompt_tokens]
        seq = self._new_sequence(Request(export.request_id, prompt, params))
        seq.token_ids = list(export.token_ids)
        seq.seed = export.seed
        if not self.block_manager.can_allocate(seq, n, []):
            raise KVPoolExhaustedError("no free KV blocks to import into")
        self.block_manager.allocate(seq, n, [])
        if isinstance(export.kv, KVBlocks):
            self.kv_cache.import_blocks(seq.block_table, export.kv.pool, export.kv.blocks)
        else:
            self.kv_cache.import_(seq.block_table, export.kv)
        seq.num_computed_tokens = n
        self.block_manager.cache_full_blocks(seq, 0)
        for pos in range(seq.num_prompt_tokens, seq.num_tokens):
            seq.feed_step(self.step_detector, seq.token_ids[pos], pos + 1)
        self.seqs[seq.request_id] = seq
        self.scheduler.add(seq)
        return seq

    # -- the step ---------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[TokenOutput]:
        t0 = time.perf_counter()
        # Tokens a speculative forward verified go out one per step, as if sampled now: the
        # caller acts on each (a step end, a pause, a rollback) before the next exists. Such a
        # step runs no forward for the others either: they wait the microseconds it takes, and
        # every sequence's verified run is out before the next forward. Were the others to
        # forward meanwhile, a sequence holding verified tokens would get one token a forward,
        # as without speculation, whenever any other sequence was decoding (batches of 4-16:
        # no gain, only the proposals' rows).
        held = [seq for seq in self.scheduler.running if seq.spec_buffer]
        if held:
            outputs = [self._hand_out(seq) for seq in held]
            self.last_num_scheduled = len(outputs)
            self._finish_step(t0, outputs)
            return outputs
        if self.config.speculative is not None:
            self._propose()
        sched = self.scheduler.schedule()
        for seq in sched.preempted:  # its KV is gone: nothing verified or proposed stands
            self._unpropose(seq)
            seq.spec_buffer.clear()
        self.last_num_scheduled = len(sched.scheduled)
        outputs = []
        if not sched.scheduled:
            self._finish_step(t0, outputs)
            return outputs
        self.kv_cache.copy_blocks(self.block_manager.take_pending_copies())
        t1, c1 = time.perf_counter(), time.thread_time()
        sampled = self.runner.execute(sched.scheduled)
        forward_s = time.perf_counter() - t1
        # What a decoding forward costs by its rows (proposals' included) sizes proposals; a
        # prefill chunk's rows cost otherwise (attention over the prompt), so those are not fed.
        if self.sizer is not None and all(
            s.seq.num_computed_tokens == s.seq.num_tokens - 1 - s.seq.num_draft
            for s in sched.scheduled
        ):
            self.sizer.cost.observe(sum(s.num_new_tokens for s in sched.scheduled), forward_s)
        self.stats.num_forwards += 1
        self.stats.forward_s += forward_s
        self.stats.forward_cpu_s += time.thread_time() - c1

        for s in sched.scheduled:
            seq = s.seq
            if seq.num_draft:
                outputs.append(self._verify(seq, s.num_new_tokens, sampled[seq.request_id]))
                continue
            prev = seq.num_computed_tokens
            seq.num_computed_tokens += s.num_new_tokens
            self.block_manager.cache_full_blocks(seq, prev)
            if s.num_new_tokens == 1:
                self.stats.num_decode_tokens += 1
            else:
                self.stats.num_prefill_tokens += s.num_new_tokens
            if seq.request_id in sampled:
                outputs.append(self._append_token(seq, *sampled[seq.request_id][0]))
        for seq in self.scheduler.running:  # proposed but not scheduled (the budget ran out)
            self._unpropose(seq)
        self._finish_step(t0, outputs)
        return outputs

    def _finish_step(self, t0: float, outputs: list[TokenOutput]) -> None:
        self.stats.num_generated_tokens += len(outputs)
        self.stats.num_steps += 1
        self.stats.step_s += time.perf_counter() - t0

    # -- speculative decoding (speculative.py) ------------------------------------------------

    def _propose(self) -> None:
        """Put proposed tokens after each decoding sequence's last one; the scheduler then
        computes them with it as one chunk. With `size_by_cost`, the step's proposals are first
        cut to what pays at this batch (proposal_sizing.py)."""
        spec = self.config.speculative
        assert spec is not None and self.proposer is not None
        running = self.scheduler.running
        cap = spec.disable_by_batch_size
        if cap is not None and len(running) > cap:
            return  # a batch this large is bound by arithmetic: proposals would cost, not pay
        proposals: list[tuple[Sequence, Candidate]] = []
        for seq in running:
            p = seq.params
            if p.guided is not None:
                continue  # a grammar masks each position as the tokens before it stand
            if seq.num_computed_tokens != seq.num_tokens - 1:
                continue  # still prefilling
            spent = seq.num_output_tokens + (seq.num_discarded_tokens if p.charge_rollbacks else 0)
            room = min(p.max_tokens - spent, self.max_model_len - seq.num_tokens) - 1
            if seq.spec_acceptance is None:
                seq.spec_acceptance = self.proposer.acceptance()
            k = seq.spec_acceptance.k(spec.num_speculative_tokens, seq.num_tokens)
            cand = self.proposer.propose(seq, min(k, room))
            if cand.tokens:
                cand.keep = len(cand.tokens)
                proposals.append((seq, cand))
        if proposals and self.sizer is not None:
            # Without proposals the step yields a token per decoding sequence and computes the
            # rows of every running one (a prefilling one's chunk, at most the step's budget).
            base_tokens = sum(s.num_computed_tokens == s.num_tokens - 1 for s in running)
            base_rows = min(
                sum(s.num_tokens - s.num_computed_tokens for s in running),
                self.config.max_num_batched_tokens,
            )
            self.sizer.size([c for _, c in proposals], base_tokens, base_rows)
        for seq, cand in proposals:
            if cand.keep:
                seq.token_ids.extend(cand.tokens[: cand.keep])  # raw: no step bookkeeping yet
                seq.num_draft = cand.keep
                assert seq.spec_acceptance is not None
                seq.spec_acceptance.confs = cand.confs[: cand.keep]
                self.stats.num_spec_proposed += cand.keep

    def _unpropose(self, seq: Sequence) -> None:
        if seq.num_draft:
            del seq.token_ids[seq.num_tokens - seq.num_draft :]
            seq.num_draft = 0

    def _verify(
        self, seq: Sequence, num_new: int, rows: list[tuple[int, float, float]]
    ) -> TokenOutput:
        """Keep the proposed tokens the target sampled too, then the target's own token after
        them; hand out the first now and buffer the rest. The KV of kept positions stands; the
        blocks past them are released, and what the rest wrote in a kept block lies past
        `num_computed_tokens`, written over later."""
        base = seq.num_tokens - seq.num_draft  # the sequence without its proposal
        proposed = seq.token_ids[base : base + num_new - 1]  # those this chunk checked
        self._unpropose(seq)
        accepted = num_accepted(proposed, [row[0] for row in rows])
        # Rejected proposals' slots go back to the pool (kept: the accepted tokens' KV).
        self.block_manager.release_past(seq, base + accepted)
        if seq.spec_acceptance is not None and proposed:
            if self.sizer is not None:
                self.sizer.table.update(seq.spec_acceptance.confs[: len(proposed)], accepted)
            seq.spec_acceptance.update(accepted, seq.num_tokens)
        self.stats.num_spec_forwards += 1
        self.stats.num_spec_accepted += accepted
        self.stats.num_decode_tokens += num_new
        seq.spec_buffer = rows[: accepted + 1]
        return self._hand_out(seq)

    def _hand_out(self, seq: Sequence) -> TokenOutput:
        """The next verified token: appended as a sampled one, its predecessor's KV computed."""
        token, logprob, entropy = seq.spec_buffer.pop(0)
        prev = seq.num_computed_tokens
        seq.num_computed_tokens = seq.num_tokens  # the KV of every token before this one
        self.block_manager.cache_full_blocks(seq, prev)
        out = self._append_token(seq, token, logprob, entropy)
        if out.finished or out.paused:
            seq.spec_buffer.clear()
        return out

    def _append_token(
        self, seq: Sequence, token: int, logprob: float, entropy: float
    ) -> TokenOutput:
        detector, eos = self.step_detector, self.eos_token_ids
        ends_step, stops = seq.append_sampled(token, logprob, detector, eos)
        p = seq.params
        reason = None
        if stops:
            reason = "stop"
        elif (
            seq.num_output_tokens + (seq.num_discarded_tokens if p.charge_rollbacks else 0)
            >= p.max_tokens
            or seq.num_tokens >= self.max_model_len
        ):
            reason = "length"
        paused = finished = False
        if reason is not None and p.pause_on_finish:
            seq.pending_finish = reason
            self.scheduler.pause(seq)
            paused = True
        elif reason is not None:
            self.scheduler.finish(seq, reason)
            del self.seqs[seq.request_id]
            finished = True
            if self.proposer is not None:
                self.proposer.remember(seq)
        elif ends_step and p.pause_on_step_end:
            self.scheduler.pause(seq)
            paused = True
        return TokenOutput(
            seq.request_id,
            token,
            seq.num_tokens - 1,
            logprob,
            entropy,
            ends_step,
            seq.num_steps,
            finished,
            reason,
            paused,
        )

    # -- batch use --------------------------------------------------------------------------

    def stalled(self) -> bool:
        return self.last_num_scheduled == 0
