"""What one step of an instance runs, as the step cost model takes it.

A step is a few distinct per-rank works (`RankWork`: decode sequences with their context sum,
prefill chunks as groups of identical chunks), each run by some of the DP ranks (`Step`): the
simulator's representative batches have one or two distinct works. `RankBatch` holds per-rank
arrays and per-sequence chunks, as measured steps have them, and reduces to a `Step`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Chunk = tuple[float, float, float]  # (count, new tokens, prefix tokens) of identical prefill chunks


@dataclass(frozen=True, slots=True)
class RankWork:
    """What one DP rank runs in a step.

    dec_seqs, dec_ctx: running decode sequences and the sum of their contexts (tokens).
    chunks: prefill chunks, `count` chunks of `new` tokens after `prefix` tokens already cached.
    """

    dec_seqs: float = 0.0
    dec_ctx: float = 0.0
    chunks: tuple[Chunk, ...] = ()
    pre_tokens: float = field(init=False, compare=False, repr=False)  # prefill tokens on the rank
    pre_seqs: float = field(init=False, compare=False, repr=False)  # prefill chunks on the rank

    def __post_init__(self):
        object.__setattr__(self, "pre_tokens", sum(c * n for c, n, _ in self.chunks))
        object.__setattr__(self, "pre_seqs", sum(c for c, _, _ in self.chunks))

    def half(self, odd: int) -> "RankWork":
        """One DBO micro-batch: half the decode sequences, every other prefill chunk (even ones
        for odd=0, odd ones for odd=1)."""
        out, start = [], 0
        for c, n, p in self.chunks:
            even = (start + c + 1) // 2 - (start + 1) // 2  # even chunk indices in [start, start + c)
            take = c - even if odd else even
            if take:
                out.append((take, n, p))
            start += c
        return RankWork(self.dec_seqs / 2.0, self.dec_ctx / 2.0, tuple(out))


@dataclass(frozen=True, slots=True)
class Step:
    """One step of an instance: distinct rank works, in rank order, and how many ranks run each."""

    works: tuple[RankWork, ...]
    ranks: tuple[int, ...]
    has_prefill: bool = field(init=False, compare=False, repr=False)  # any prompt tokens on any rank

    def __post_init__(self):
        object.__setattr__(self, "has_prefill", any(w.pre_tokens > 0 for w in self.works))

    @staticmethod
    def uniform(dp: int, work: RankWork) -> "Step":
        return Step((work,), (dp,))


@dataclass
class RankBatch:
    """Work on each DP rank for one step, per sequence (measured steps, replays).

    dec_batch, dec_ctx: [R] running decode sequences and the sum of their contexts per rank.
    pre_new, pre_prefix: per rank, arrays over the prefill chunks (new tokens, tokens before).
    """

    dec_batch: np.ndarray
    dec_ctx: np.ndarray
    pre_new: list = field(default_factory=list)
    pre_prefix: list = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return len(self.dec_batch)

    def step(self) -> Step:
        """The same work as a Step: each rank's chunks one by one, identical ranks merged."""
        works: dict[RankWork, int] = {}
        for r in range(self.ranks):
            chunks = ()
            if self.pre_new:
                chunks = tuple((1, float(n), float(p)) for n, p in zip(self.pre_new[r], self.pre_prefix[r]))
            w = RankWork(float(self.dec_batch[r]), float(self.dec_ctx[r]), chunks)
            works[w] = works.get(w, 0) + 1
        return Step(tuple(works), tuple(works.values()))
