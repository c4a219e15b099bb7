"""Prefix cache of one serving instance: KV blocks keyed by block hash, evicted least recently used.

As in vLLM's automatic prefix caching, a prompt is a chain of blocks of `block_size` tokens and a
block's hash names its whole prefix (Mooncake's hash_ids are such chained ids), so a request reuses
the longest run of leading blocks the cache holds. A request's blocks enter when its prefill
finishes; a hit touches the blocks it reuses; once the cache holds more than its capacity the least
recently used blocks leave. A request's blocks are touched last block first, so its tail is evicted
before its head (vLLM frees a finished request's blocks in reverse order for the same reason).

Cost: an OrderedDict (hash -> LRU position, O(1) move and pop) probed once per block, so a lookup
or an insert is O(blocks of the request).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np


class PrefixCache:
    """LRU set of block hashes with room for `capacity_blocks` blocks."""

    def __init__(self, capacity_blocks: int):
        if capacity_blocks < 1:
            raise ValueError(f"a prefix cache needs room for at least one block, got {capacity_blocks}")
        self.capacity_blocks = int(capacity_blocks)
        self._lru: OrderedDict[int, None] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, block: int) -> bool:
        return block in self._lru

    def match(self, blocks: Sequence[int]) -> int:
        """Leading blocks of `blocks` the cache holds (no side effect: what a router asks)."""
        n = 0
        for b in blocks:
            if b not in self._lru:
                break
            n += 1
        return n

    def lookup(self, blocks: Sequence[int]) -> int:
        """Leading blocks held, touched as reused (what a request gets when it is scheduled)."""
        n = self.match(blocks)
        for b in reversed(blocks[:n]):
            self._lru.move_to_end(b)
        return n

    def insert(self, blocks: Sequence[int]) -> None:
        """A prefill computed `blocks`: hold them (most recent first in line: the head), evict the LRU."""
        for b in reversed(blocks):
            self._lru[b] = None
            self._lru.move_to_end(b)
        while len(self._lru) > self.capacity_blocks:
            self._lru.popitem(last=False)


def cached_tokens(hit_blocks: int, block_size: int, prompt_tokens: int) -> int:
    """Prompt tokens served from `hit_blocks` leading blocks (at least one token is always computed)."""
    return max(min(hit_blocks * block_size, prompt_tokens - 1), 0)


class InstancePrefixes:
    """One instance's prefix cache seen through the request table: hit tokens per request id.

    `cached` [N] is the simulation's per-request cached-token array; `schedule` writes a request's
    hit into it, so the instance's batching and the summary read the hits the cache gave."""

    def __init__(self, capacity_tokens: float, blocks: Sequence[Sequence[int]], block_size: int,
                 isl: np.ndarray, cached: np.ndarray):
        self.cache = PrefixCache(max(int(capacity_tokens // block_size), 1))
        self.blocks, self.block_size, self.isl, self.cached = blocks, block_size, isl, cached

    def hit_tokens(self, rid: int) -> int:
        """Tokens of request `rid` this instance would serve from its cache now (router's question)."""
        return cached_tokens(self.cache.match(self.blocks[rid]), self.block_size, int(self.isl[rid]))

    def schedule(self, rid: int) -> int:
        """Request `rid` is first scheduled here: its cached tokens, recorded in `cached`."""
        hit = cached_tokens(self.cache.lookup(self.blocks[rid]), self.block_size, int(self.isl[rid]))
        self.cached[rid] = hit
        return hit

    def finish(self, rid: int) -> None:
        """The prefill of `rid` finished: its blocks are cached."""
        self.cache.insert(self.blocks[rid])
