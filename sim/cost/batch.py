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
    _hash: int = field(init=False, compare=False, repr=False)  # a work is a memo key several times a step

    def __post_init__(self):
        tokens = seqs = 0  # (sum() over the chunks, in one loop)
        for c, n, _ in self.chunks:
            tokens += c * n
            seqs += c
        object.__setattr__(self, "pre_tokens", tokens)
        object.__setattr__(self, "pre_seqs", seqs)
        object.__setattr__(self, "_hash", hash((self.dec_seqs, self.dec_ctx, self.chunks)))

    def __hash__(self) -> int:
        return self._hash

    def half(self, second: int) -> "RankWork":
        """One DBO micro-batch (second=0: the first, 1: the second): half the decode sequences and
        half the prefill tokens, cut in chunk order at half their count the way vLLM cuts a batch's
        tokens (v1/worker/ubatch_utils.py): a chunk across the cut is split, its second part
        coming after the first as prefix."""
        return self.halves()[second]

    def halves(self) -> tuple["RankWork", "RankWork"]:
        """Both DBO micro-batches (`half`), cut in one pass."""
        cut, taken, first, rest = self.pre_tokens / 2.0, 0.0, [], []
        for c, n, p in self.chunks:
            if taken >= cut or n <= 0:
                rest.append((c, n, p))
                continue
            whole = min(c, float(int((cut - taken) / n)))
            if whole:
                first.append((whole, n, p))
                taken += whole * n
            left = c - whole
            part = min(cut - taken, n) if left else 0.0
            if part > 0:
                first.append((1.0, part, p))
                if n - part > 0:
                    rest.append((1.0, n - part, p + part))
                left -= 1
                taken += part
            if left > 0:
                rest.append((left, n, p))
        dec, ctx = self.dec_seqs / 2.0, self.dec_ctx / 2.0
        return RankWork(dec, ctx, tuple(first)), RankWork(dec, ctx, tuple(rest))

    def scaled(self, share: float) -> "RankWork":
        """`share` of this work (a pipeline-parallel micro-batch: 1 / pp of the sequences)."""
        return RankWork(self.dec_seqs * share, self.dec_ctx * share,
                        tuple((c * share, n, p) for c, n, p in self.chunks))


@dataclass(frozen=True, slots=True)
class Step:
    """One step of an instance: distinct rank works, in rank order, and how many ranks run each."""

    works: tuple[RankWork, ...]
    ranks: tuple[int, ...]
    has_prefill: bool = field(init=False, compare=False, repr=False)  # any prompt tokens on any rank
    # requests the instance admits into / retires from its running set this step (the scheduler's and
    # output processing's per-request work, sim/cost/host.py); the pricers pass them only where the
    # profile's host block prices them (HostModel.turnover)
    admitted: float = 0.0
    finished: float = 0.0

    def __post_init__(self):
        has = False  # any(), without a generator: a Step is built several times per priced step
        for w in self.works:
            if w.pre_tokens > 0:
                has = True
                break
        object.__setattr__(self, "has_prefill", has)

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
            chunks: tuple[tuple[int, float, float], ...] = ()
            if self.pre_new:
                chunks = tuple((1, float(n), float(p)) for n, p in zip(self.pre_new[r], self.pre_prefix[r]))
            w = RankWork(float(self.dec_batch[r]), float(self.dec_ctx[r]), chunks)
            works[w] = works.get(w, 0) + 1
        return Step(tuple(works), tuple(works.values()))
