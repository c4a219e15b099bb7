"""Step prices for the simulator: the cost model behind a cache keyed on quantised batch state.

Decode steps repeat with nearly the same state thousands of times; quantising the global batch
to 1% and contexts to 64-token buckets keeps the error well under 1% and makes a step a dict
lookup. A prefill (or mixed) step is reduced per rank to (tokens, sequences, attention pairs
sum n*(p + n/2)) in 2% buckets and priced at a representative batch with the same three numbers:
exact for dense attention, within the bucket width for windowed / top-k attention.
"""
from __future__ import annotations

import math

import numpy as np

from .cost.step import CostContext, RankBatch, step_cost

CTX_BUCKET = 64  # tokens of mean context per sequence
LOG_STEP = math.log(1.01)  # 1% buckets for the global batch
LOG_STEP_PREFILL = math.log(1.02)  # 2% buckets for prefill tokens and attention pairs


def _qlog(x: float, step: float) -> int:
    return int(round(math.log(x) / step)) if x >= 1 else -1


def _unq(k: int, step: float) -> float:
    return math.exp(k * step) if k >= 0 else 0.0


class StepPricer:
    """Prices steps of one instance layout; `decode` is cached, `step` is exact."""

    def __init__(self, cx: CostContext):
        self.cx = cx
        self.ranks = cx.layout.dp
        self._cache: dict = {}
        self.calls = 0
        self.misses = 0
        # engine-loop overhead between steps: hidden by async scheduling, else paid every step
        self.iteration_s = 0.0 if cx.layout.async_scheduling else cx.prof.cpu_iteration_s

    def decode(self, batch: np.ndarray, ctx: np.ndarray) -> float:
        """Seconds of a decode step with per-rank running sequences and context sums."""
        self.calls += 1
        r = int(np.argmax(ctx + batch * 1e6)) if self.ranks > 1 else 0  # largest batch, then context
        b_max = int(batch[r])
        total = float(batch.sum())
        mean_ctx = ctx[r] / max(b_max, 1)
        key = (b_max, int(mean_ctx // CTX_BUCKET), int(round(math.log(max(total, 1.0)) / LOG_STEP)))
        hit = self._cache.get(key)
        if hit is not None:
            return hit + self.iteration_s
        self.misses += 1
        rep_ctx = (key[1] + 0.5) * CTX_BUCKET
        tot = math.exp(key[2] * LOG_STEP) if total >= 1 else 0.0
        dec_b = np.full(self.ranks, max(tot - b_max, 0.0) / max(self.ranks - 1, 1))
        dec_b[0] = b_max
        sec = step_cost(self.cx, RankBatch(dec_b, dec_b * rep_ctx)).seconds
        self._cache[key] = sec
        return sec + self.iteration_s

    def step(self, rb: RankBatch) -> float:
        """Seconds of a prefill or mixed step (decode part quantised like `decode`)."""
        self.calls += 1
        key = [(int(b), int(c / max(b, 1) // CTX_BUCKET)) for b, c in zip(rb.dec_batch, rb.dec_ctx)]
        pre = [(0, 0, 0)] * len(key)
        for r, (n, p) in enumerate(zip(rb.pre_new, rb.pre_prefix)):
            tok = float(n.sum())
            pairs = float(np.dot(n, p + n / 2.0))
            pre[r] = (_qlog(tok, LOG_STEP_PREFILL), len(n), _qlog(pairs, LOG_STEP_PREFILL))
        # the step is symmetric in its ranks (slowest rank, sum and max of tokens): sort them
        key = tuple(sorted(d + q for d, q in zip(key, pre)))
        hit = self._cache.get(key)
        if hit is not None:
            return hit + self.iteration_s
        self.misses += 1
        dec_b = np.array([k[0] for k in key], float)
        dec_c = np.array([(k[1] + 0.5) * CTX_BUCKET for k in key]) * dec_b
        news, prefs = [], []
        for _, _, qt, nseq, qp in key:
            tok, pairs = _unq(qt, LOG_STEP_PREFILL), _unq(qp, LOG_STEP_PREFILL)
            n = tok / max(nseq, 1)
            p = max(pairs / max(tok, 1e-9) - n / 2.0, 0.0)
            news.append(np.full(nseq, n))
            prefs.append(np.full(nseq, p))
        sec = step_cost(self.cx, RankBatch(dec_b, dec_c, news, prefs)).seconds
        self._cache[key] = sec
        return sec + self.iteration_s
