"""Continuous batching with chunked prefill, preemption by recompute, and pause/resume.

Every engine step the scheduler fills a token budget: running sequences first (one token each
when decoding, a chunk when a prefill is still in progress), then waiting sequences in order,
whose prompts are chunked to what is left of the budget. When the block pool runs dry, the
youngest running sequence is preempted: its blocks are freed and it re-enters the waiting
queue at the front, to be recomputed (prefix caching usually makes that cheap).

Paused sequences leave the batch but keep their blocks, so resuming costs nothing. No torch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pipeline.engine.block_manager import BlockManager
from pipeline.engine.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledSequence:
    seq: Sequence
    num_new_tokens: int  # tokens whose KV this step computes, from seq.num_computed_tokens on

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the last token, so a new token is sampled after it."""
        return self.seq.num_computed_tokens + self.num_new_tokens == self.seq.num_tokens


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)


class Scheduler:
    """Decides which sequences run in the next step and how many tokens each computes."""

    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int):
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.paused: dict[str, Sequence] = {}
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        """Queue `seq` behind every waiting sequence of its priority or a more urgent one."""
        seq.status = SequenceStatus.WAITING
        if not self.waiting or self.waiting[-1].priority <= seq.priority:
            self.waiting.append(seq)
            return
        at = next(i for i, w in enumerate(self.waiting) if w.priority > seq.priority)
        self.waiting.insert(at, seq)

    @property
    def has_schedulable(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.paused)

    def schedule(self) -> SchedulerOutput:
        """This step's batch."""
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        bm = self.block_manager

        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
            while not bm.can_allocate(seq, num_new, []):
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is not SequenceStatus.RUNNING:
                break
            bm.allocate(seq, num_new, [])
            out.scheduled.append(ScheduledSequence(seq, num_new))
            budget -= num_new
            i += 1

        # Admitting new work right after a preemption would only thrash the pool.
        if out.preempted:
            return out
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            cached = bm.match_prefix(seq) if not seq.block_table else []
            base = len(cached) * bm.block_size if cached else seq.num_computed_tokens
            num_new = min(seq.num_tokens - base, budget)
            if not bm.can_allocate(seq, num_new, cached):
                break
            self.waiting.popleft()
            bm.allocate(seq, num_new, cached)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            out.scheduled.append(ScheduledSequence(seq, num_new))
            budget -= num_new
        return out

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    # -- step-aware control -----------------------------------------------------------------

    def _detach(self, seq: Sequence) -> None:
        """Take `seq` out of whichever queue holds it."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        elif seq.status is SequenceStatus.PAUSED:
            del self.paused[seq.request_id]

    def pause(self, seq: Sequence) -> None:
        if seq.status is SequenceStatus.PAUSED:
            return
        self._detach(seq)
        seq.status = SequenceStatus.PAUSED
        self.paused[seq.request_id] = seq

    def resume(self, seq: Sequence) -> None:
        if seq.status is not SequenceStatus.PAUSED:
            return
        del self.paused[seq.request_id]
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)  # it already holds its blocks: let it back in first

    def finish(self, seq: Sequence, reason: str) -> None:
        """Remove `seq` for good and release its blocks."""
        self._detach(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
