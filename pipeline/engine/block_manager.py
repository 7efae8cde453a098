"""Paged KV block accounting: free list, block tables, prefix caching. No torch here.

Prefix caching follows vLLM/nano-vllm: a full block is identified by a chained hash (its hash
covers every block before it), and a hash hit is confirmed by comparing the block's tokens, so
a collision is caught rather than trusted. Freed blocks keep their hash until they are reused,
which is what lets a later request with the same prefix skip its prefill.

Each block also has a generation, bumped whenever the block is taken for new content. A
handoff that lends blocks to another process names them with their generations, so a reader
can tell the blocks it was promised from blocks since reused (pipeline/transfer/shm_pool.py
keeps the generations in shared memory for that reason).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import deque
from collections.abc import MutableSequence

from pipeline.engine.sequence import Sequence

NO_HASH = -1


def hash_block(prev_hash: int, token_ids: list[int]) -> int:
    """Chained, process-independent hash of one full block (stable across workers)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(prev_hash.to_bytes(8, "little", signed=True))
    h.update(array("q", token_ids).tobytes())
    return int.from_bytes(h.digest(), "little", signed=True) & 0x7FFF_FFFF_FFFF_FFFF


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.hash = NO_HASH
        self.token_ids: list[int] = []


class BlockManager:
    """Owns the block pool; the scheduler asks it for slots, the engine for copies."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        generations: MutableSequence[int] | None = None,
    ):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.hash_to_block_id: dict[int, int] = {}
        # (src, dst) block copies the engine must apply before the next forward (copy-on-write).
        self.pending_copies: list[tuple[int, int]] = []
        self.num_prefix_hits = 0  # tokens served from the prefix cache, cumulative
        if generations is not None and len(generations) != num_blocks:
            raise ValueError(f"{len(generations)} generations for {num_blocks} blocks")
        self.generations = generations if generations is not None else array("q", [0]) * num_blocks

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_blocks

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- allocation -------------------------------------------------------------------------

    def _take_free_block(self) -> int:
        block_id = self.free_block_ids.popleft()
        block = self.blocks[block_id]
        if block.hash != NO_HASH and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]  # evict: its content is about to change
        block.hash = NO_HASH
        block.token_ids = []
        block.ref_count = 1
        self.generations[block_id] += 1
        return block_id

    def _take_cached_block(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self.free_block_ids.remove(block_id)
        block.ref_count += 1

    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks covering a prefix of `seq` (without taking them).

        Only blocks inside the first `num_tokens - 1` tokens count: the last token is always
        recomputed, because its logits are needed to sample from.
        """
        if not self.enable_prefix_caching:
            return []
        bs = self.block_size
        hits: list[int] = []
        prev = NO_HASH
        for i in range((seq.num_tokens - 1) // bs):
            tokens = seq.token_ids[i * bs : (i + 1) * bs]
            h = hash_block(prev, tokens)
            block_id = self.hash_to_block_id.get(h, -1)
            if block_id == -1 or self.blocks[block_id].token_ids != tokens:
                break
            hits.append(block_id)
            prev = h
        return hits

    def can_allocate(self, seq: Sequence, num_new_tokens: int, cached: list[int]) -> bool:
        """Whether `num_new_tokens` more tokens fit (after taking `cached`, if any)."""
        if seq.block_table or not cached:
            needed = self.num_blocks_for(seq.num_computed_tokens + num_new_tokens)
            return needed - len(seq.block_table) <= self.num_free_blocks
        needed = self.num_blocks_for(len(cached) * self.block_size + num_new_tokens) - len(cached)
        # Cached blocks that sit in the free list stop being free capacity once taken.
        needed += sum(1 for b in cached if self.blocks[b].ref_count == 0)
        return needed <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_new_tokens: int, cached: list[int]) -> None:
        """Grow `seq.block_table` to hold its computed tokens plus `num_new_tokens`.

        With `cached` (from `match_prefix`, only for a sequence holding no blocks), the hit
        blocks are taken first and count as computed.
        """
        if not seq.block_table and cached:
            for block_id in cached:
                self._take_cached_block(block_id)
            seq.block_table.extend(cached)
            seq.num_computed_tokens = seq.num_cached_tokens = len(cached) * self.block_size
            self.num_prefix_hits += seq.num_cached_tokens
        needed = self.num_blocks_for(seq.num_computed_tokens + num_new_tokens)
        while len(seq.block_table) < needed:
            seq.block_table.append(self._take_free_block())

    def free(self, seq: Sequence) -> None:
        # Reverse order: the tail of a sequence is least likely to be shared, so it is reused
        # first and shared prefixes survive longer in the free list.
        for block_id in reversed(seq.block_table):
            self._release(block_id)
        seq.block_table = []
        seq.num_computed_tokens = 0

    def pin(self, block_ids: list[int]) -> None:
        """Hold blocks past their sequence (a KV handoff another process reads in place)."""
        for block_id in block_ids:
            self._take_cached_block(block_id)

    def unpin(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            self._release(block_id)

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free_block_ids.append(block_id)

    # -- after a forward --------------------------------------------------------------------

    def cache_full_blocks(self, seq: Sequence, prev_num_computed: int) -> None:
        """Register blocks that became full (and computed) since `prev_num_computed`."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        first = prev_num_computed // bs
        last = seq.num_computed_tokens // bs  # exclusive: only full blocks
        if first >= last:
            return
        prev = self.blocks[seq.block_table[first - 1]].hash if first > 0 else NO_HASH
        for i in range(first, last):
            block = self.blocks[seq.block_table[i]]
            tokens = seq.token_ids[i * bs : (i + 1) * bs]
            if block.hash == NO_HASH or block.token_ids != tokens:
                block.hash = hash_block(prev, tokens)
                block.token_ids = tokens
                self.hash_to_block_id.setdefault(block.hash, block.block_id)
            prev = block.hash

    # -- rollback ---------------------------------------------------------------------------

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Roll `seq` back to its first `num_tokens` tokens and release the blocks past them.

        A partially kept block will be written again, so it must be private: a shared one is
        copied first (the copy is queued in `pending_copies`), and a private one loses its hash.
        """
        seq.truncate(num_tokens)
        bs = self.block_size
        keep = self.num_blocks_for(seq.num_computed_tokens)
        for block_id in seq.block_table[keep:]:
            self._release(block_id)
        del seq.block_table[keep:]
        if seq.num_computed_tokens % bs == 0 or not seq.block_table:
            return
        last = self.blocks[seq.block_table[-1]]
        if last.ref_count > 1:
            new_id = self._take_free_block() if self.free_block_ids else -1
            if new_id == -1:
                # No room to copy: drop the partial block and recompute its tokens instead.
                self._release(last.block_id)
                seq.block_table.pop()
                seq.num_computed_tokens = len(seq.block_table) * bs
                return
            self.pending_copies.append((last.block_id, new_id))
            self._release(last.block_id)
            seq.block_table[-1] = new_id
        elif last.hash != NO_HASH:
            if self.hash_to_block_id.get(last.hash) == last.block_id:
                del self.hash_to_block_id[last.hash]
            last.hash = NO_HASH
            last.token_ids = []

    def release_past(self, seq: Sequence, num_tokens: int) -> None:
        """Release the blocks past the first `num_tokens` positions: the slots of rejected
        speculative tokens, which hold nothing computed and were never registered."""
        keep = self.num_blocks_for(num_tokens)
        for block_id in seq.block_table[keep:]:
            self._release(block_id)
        del seq.block_table[keep:]

    def take_pending_copies(self) -> list[tuple[int, int]]:
        copies, self.pending_copies = self.pending_copies, []
        return copies
