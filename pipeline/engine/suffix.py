"""Suffix decoding's proposer (SuffixDecoding, arXiv 2411.04975; vLLM's `suffix` method): suffix
trees over the job's own tokens and over earlier jobs' outputs of the same scope (a tenant).

A tree here is a suffix trie cut at `depth` tokens: every run of at most `depth` tokens of the
text it holds is a path from the root, each node counting the runs through it. To propose, the
longest suffix of the sequence (at most `depth - 1` tokens, so something can follow) that is a
path with a continuation is found, then the continuation is walked, most frequent child first,
while the estimated probability (the product of child count over parent count) stays at or
above `min_token_prob` and the length within `max_spec_factor` times the matched length. The
job's tree and its scope's tree each propose; the longer match wins (the job's on a tie).

Pure Python and bounded: appending a token touches `depth` nodes; a scope keeps the outputs of
its `max_cached_requests` latest jobs, the store `MAX_STORED_TOKENS` in all, and the oldest's
counts are removed when one more comes. What
a proposer proposes changes only how fast tokens come, never which: the engine accepts a
proposed token only where it equals the target's own sample (speculative.py).
"""

from __future__ import annotations

from collections import OrderedDict

from pipeline.config import SpeculativeConfig

Draft = tuple[list[int], list[float]]  # proposed tokens, and how likely each (count ratio)


class _Node:
    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.count = 0


class SuffixTree:
    """A suffix trie of depth `depth` over one or more token sequences (each its own: runs never
    cross from one sequence into the next)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.root = _Node()

    def add(self, tokens: list[int], delta: int = 1) -> None:
        """Count every run of at most `depth` tokens of `tokens` (delta -1: uncount, as a
        sequence added before; nodes whose count falls to 0 are removed)."""
        active: list[_Node] = []
        for tok in tokens:
            active = self.feed(active, tok, delta)

    def feed(self, active: list[_Node], tok: int, delta: int = 1) -> list[_Node]:
        """One more token after the runs whose last nodes are `active` (newest run first):
        counts the runs it extends and the run it starts; returns their nodes."""
        nxt: list[_Node] = []
        for parent in [self.root, *active[: self.depth - 1]]:
            child = parent.children.get(tok)
            if child is None:
                if delta < 0:
                    continue  # never added: nothing to uncount
                child = parent.children[tok] = _Node()
            child.count += delta
            if child.count <= 0:
                del parent.children[tok]
            nxt.append(child)
        return nxt

    def match(self, tokens: list[int], max_len: int) -> tuple[_Node | None, int]:
        """The node of the longest suffix of `tokens` (at most `max_len` tokens) that is a path
        with a child to go on with, and its length; (None, 0) if none."""
        for m in range(min(max_len, len(tokens)), 0, -1):
            node = self.root
            for tok in tokens[len(tokens) - m :]:
                node = node.children.get(tok)
                if node is None:
                    break
            if node is not None and node.children:
                return node, m
        return None, 0

    @staticmethod
    def continuation(node: _Node, k: int, min_prob: float) -> Draft:
        """Up to `k` tokens from `node`, the most frequent child each time, while the product of
        child / parent counts stays >= `min_prob`; with each token its own ratio (how often the
        text went on so from there)."""
        tokens: list[int] = []
        ratios: list[float] = []
        prob = 1.0
        while len(tokens) < k and node.children:
            tok, child = max(node.children.items(), key=lambda kv: kv[1].count)
            ratio = child.count / node.count
            prob *= ratio
            if prob < min_prob:
                break
            tokens.append(tok)
            ratios.append(ratio)
            node = child
        return tokens, ratios


class RequestTree:
    """One job's tree, kept in step with its tokens: tokens appended since the last sync are
    added as they come. Tokens a rollback took away stay counted (text the job wrote, as the
    scope's tree keeps earlier jobs' outputs); indexing goes on from the position rolled back to.
    """

    __slots__ = ("tree", "num_indexed", "_active")

    def __init__(self, depth: int) -> None:
        self.tree = SuffixTree(depth)
        self.num_indexed = 0
        self._active: list[_Node] = []  # nodes of the runs ending at the last indexed token

    def sync(self, tokens: list[int]) -> None:
        if len(tokens) < self.num_indexed:
            self.rewind(tokens)
        for tok in tokens[self.num_indexed :]:
            self._active = self.tree.feed(self._active, tok)
        self.num_indexed = len(tokens)

    def match(self, max_len: int) -> tuple[_Node | None, int]:
        """SuffixTree.match of the indexed tokens, from the runs ending at the last one (no walk
        from the root: the job's tree holds its own suffixes)."""
        for m in range(min(max_len, len(self._active)), 0, -1):
            node = self._active[m - 1]
            if node.children:
                return node, m
        return None, 0

    def rewind(self, tokens: list[int]) -> None:
        """Go on from the end of `tokens` (a prefix of what was indexed, then maybe more)."""
        n = min(len(tokens), self.num_indexed)
        active: list[_Node] = []
        for length in range(1, min(self.tree.depth, n) + 1):
            node: _Node | None = self.tree.root
            for tok in tokens[n - length : n]:
                node = node.children.get(tok) if node is not None else None
            if node is None:
                break
            active.append(node)
        self._active, self.num_indexed = active, n


# Tokens of earlier outputs one engine keeps, over all scopes: a bound of ours beside vLLM's
# request count. A Python trie costs about 150 bytes a node and up to `depth` nodes a token, so
# vLLM's 10,000 requests of a reasoning model's length would not fit a worker's memory.
MAX_STORED_TOKENS = 1 << 18


class SuffixStore:
    """Earlier jobs' outputs, a tree per scope (a tenant: nothing is shared across scopes), each
    holding its `max_requests` latest, and `max_tokens` tokens in all scopes together; the
    oldest's counts are removed when one more would pass either bound."""

    def __init__(self, depth: int, max_requests: int, max_tokens: int = MAX_STORED_TOKENS) -> None:
        self.depth = depth
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.num_tokens = 0
        self._trees: dict[str, SuffixTree] = {}
        self._kept: dict[str, OrderedDict[str, list[int]]] = {}
        self._order: OrderedDict[tuple[str, str], None] = OrderedDict()  # oldest first

    def tree(self, scope: str) -> SuffixTree | None:
        return self._trees.get(scope)

    def add(self, scope: str, request_id: str, output: list[int]) -> None:
        if self.max_requests < 1 or not output:
            return
        output = list(output[-self.max_tokens :])
        self._drop(scope, request_id)  # the same id again: its newer output replaces the older
        tree = self._trees.setdefault(scope, SuffixTree(self.depth))
        self._kept.setdefault(scope, OrderedDict())[request_id] = output
        self._order[scope, request_id] = None
        self.num_tokens += len(output)
        tree.add(output)
        while len(self._kept[scope]) > self.max_requests:
            self._drop(scope, next(iter(self._kept[scope])))
        while self.num_tokens > self.max_tokens:
            self._drop(*next(iter(self._order)))

    def _drop(self, scope: str, request_id: str) -> None:
        kept = self._kept.get(scope)
        if kept is None or request_id not in kept:
            return
        old = kept.pop(request_id)
        del self._order[scope, request_id]
        self.num_tokens -= len(old)
        self._trees[scope].add(old, delta=-1)
        if not kept:  # a scope with nothing kept holds no tree
            del self._kept[scope], self._trees[scope]

    def num_requests(self, scope: str) -> int:
        return len(self._kept.get(scope, ()))


def propose_suffix(
    config: SpeculativeConfig,
    tokens: list[int],
    k: int,
    own: RequestTree,
    shared: SuffixTree | None,
) -> Draft:
    """Up to `k` tokens after `tokens` from the job's tree (synced here) or its scope's, with
    each its count ratio (SuffixTree.continuation)."""
    if k < 1 or not tokens:
        return [], []
    own.sync(tokens)
    max_len = config.suffix_decoding_max_tree_depth - 1
    best: tuple[int, Draft] = (0, ([], []))
    for node, m in (
        own.match(max_len),
        shared.match(tokens, max_len) if shared is not None else (None, 0),
    ):
        if node is None or m <= best[0]:
            continue
        limit = min(k, max(1, int(config.suffix_decoding_max_spec_factor * m)))
        draft = SuffixTree.continuation(node, limit, config.suffix_decoding_min_token_prob)
        if draft[0]:
            best = (m, draft)
    return best[1]
