"""Step prices of one instance layout: the one step pricer behind the simulator and the planner.

`price(step)` is exact (the planner's estimate asks it for the steps it reasons about). The
simulator's calls go through a cache keyed on quantised batch state: decode steps repeat with
nearly the same state thousands of times; quantising the global batch and the mean context of
the slowest rank to 1% buckets (a representative value within 0.5% of the real one) keeps a
step's error under 0.5% and makes a step a dict lookup. A prefill (or mixed) step is reduced per
rank to (tokens, sequences, attention pairs sum n*(p + n/2)) in 2% buckets (within 1%) and
priced at a representative batch with the same three numbers: exact for dense attention, within
the bucket width for windowed / top-k attention. (Prefill steps rarely repeat, so their buckets
buy little speed; they stay at 2% because TTFT tails near prefill saturation move by several
percent with any 1% change of step prices, see benchmarks/RESULTS.md.) Every price is a step
period (StepCost.period_s: the step, or the API server's time to stream its tokens when longer:
sim/cost/host.py), as the planner's estimate uses it.

Given a random generator (the simulator's, seeded), `decode` and `step` also draw each step's
routing imbalance: a cached step keeps its period at the mean imbalance and its change per
standard deviation of the per-step imbalance (StepModel.period_spread), and a call returns the
first plus a standard normal draw (truncated at 3 sigma) times the second. `price` and `uniform`
stay at the mean, as the planner's estimate prices steps. With a profile's measured step-time spread
(sim/step_spread.py), `decode` and `step` multiply each period by that step's seeded log-normal factor
(decode-only steps by the decode series, steps with prompt tokens by the prefill one).
"""
from __future__ import annotations

import math
import pickle
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import replace
from math import log as _log

import numpy as np

from .cost.roofline import StepCost
from .cost.step import CostContext, RankWork, Step, StepModel, price_key
from .step_spread import StepSpread

LOG_STEP = math.log(1.01)  # 1% buckets for the global batch and mean contexts
LOG_STEP_PREFILL = math.log(1.02)  # 2% buckets for prefill tokens and attention pairs
# step models and step caches of this many pricings are kept for the next simulation in the process
# (StepPricer.shared: a planner's or what-if study's runs price the same layouts again): a disaggregated
# plan's three (prefill, decode with draws, decode at mean periods for the warm start) and one more.
# (H200 32-GPU plan: 5,278 priced steps with 4 or 8 kept, 9,583 with 2; 576 GPUs: the memos of 8 held ~18 MB)
KEPT = 4
_kept: OrderedDict = OrderedDict()
# inside `persisted()` (the planner's verification): each kept pricing's disk cache file, the entries its step
# cache held when registered, and the cache itself (None: outside, nothing read or written)
_disk: dict | None = None


@contextmanager
def persisted():
    """Within this block, StepPricer.shared's step caches are also kept across processes: a pricing's
    cache starts with what the disk cache (rackplan/diskcache.py, `step-prices/`) holds for it and is
    written back, grown, at the end. A cached step's price is a function of its key alone (`shared`) and
    of the pricing and the code, which name the file, so runs give the same figures, only with fewer
    steps to price (the planner's verification: sim/search/planner.verify)."""
    global _disk
    from rackplan.diskcache import cache_dir, store

    if _disk is not None or cache_dir() is None:
        yield
        return
    _disk = {}
    try:
        yield
    finally:
        done, _disk = _disk, None
        for path, n, cache in done.values():
            if len(cache) > n:
                store(path, pickle.dumps(cache, protocol=pickle.HIGHEST_PROTOCOL))


def _from_disk(cx: CostContext, mean: bool, cache: dict) -> tuple:
    """(cache file, entries, cache) of a pricing (persisted): `cache` given what its file holds."""
    from rackplan.diskcache import code_version, pickle_entry, read_pickle

    key = repr((cx.model, cx.hw, cx.prof, cx.skew, cx.core_share, price_key(cx.layout), mean, code_version()))
    path = pickle_entry("step-prices", key)
    found = read_pickle(path)  # (missing or corrupt: priced again, and replaced at the end)
    if isinstance(found, dict):
        for k, v in found.items():
            cache.setdefault(k, v)
    return path, len(cache), cache


def _qlog(x: float, step: float) -> int:
    """Bucket of x >= 1 on a log scale (-1 for x < 1, which stands for 0)."""
    return round(_log(x) / step) if x >= 1 else -1  # (round of a float is an int)


def _unq(k: int, step: float) -> float:
    return math.exp(k * step) if k >= 0 else 0.0


class StepPricer:
    """Prices steps of one instance layout; `decode` and `step` are cached, `price` is exact."""

    def __init__(self, cx: CostContext, rng: np.random.Generator | None = None, model: StepModel | None = None,
                 ops: bool = True):
        self.cx = cx
        self.model = model or cx.step_model  # a StepModel.variant shares another layout's device pricing
        self._price = self.model.price if ops else self.model.cost  # (without ops: no op breakdown)
        self.ranks = cx.layout.dp
        self._exact: dict[Step, StepCost] = {}
        self._cache: dict = {}
        # a prefill step's rank work per rank key (step's key part): the same object each time, so the
        # StepModel's memos keyed on rank works find it by identity (no field-by-field comparison)
        self._works: dict[tuple, RankWork] = {}
        self.calls = 0
        self.misses = 0
        self._rng = rng
        self._z: list[float] = []  # pre-drawn per-step imbalance draws, used from the end
        self.turnover = self.model.host.turnover  # admitted / finished requests change a step's price
        self._slow: np.ndarray | None = None  # decode: the slowest-rank buffer
        # measured step-time variance (the profile's step_time_spread; None: every step at its price)
        self._spread = StepSpread.of(cx.prof, rng)

    @classmethod
    def shared(cls, cx: CostContext, rng: np.random.Generator | None = None) -> "StepPricer":
        """A pricer of `cx` whose step model and caches are shared with the earlier pricers of the
        same pricing (model, hardware and profile objects, skew, core share, price_key of the layout, with or
        without draws) in this process, the last KEPT of them: a cached step's price is a function of
        its key alone, so a simulation gives the same figures, only with fewer steps to price."""
        key = (id(cx.model), id(cx.hw), id(cx.prof), cx.skew, cx.core_share, price_key(cx.layout), rng is None)
        hit = _kept.pop(key, None)
        if hit is None:  # (the entry holds the specs through its model: their ids stay theirs)
            hit = StepModel(replace(cx, layout=key[5])), {}, {}
        _kept[key] = hit
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
        if _disk is not None and key not in _disk:
            _disk[key] = _from_disk(cx, rng is None, hit[1])
        pr = cls(cx, rng, hit[0])
        pr._cache, pr._exact = hit[1], hit[2]
        return pr

    def _period(self, step: Step):
        """What the cache keeps for a step: its period, or (with draws) its period and spread."""
        return self.model.period(step) if self._rng is None else self.model.period_spread(step)

    def _value(self, hit) -> float:
        """A cached step's period for this call (a fresh imbalance draw where it varies)."""
        if self._rng is None:
            return hit
        p0, slope = hit
        if not slope:
            return p0
        if not self._z:
            self._z = np.clip(self._rng.standard_normal(4096), -3.0, 3.0).tolist()
        return p0 + slope * self._z.pop()

    def price(self, step: Step) -> StepCost:
        """Exact price of a step, with its op breakdown (unless the pricer was made without ops)."""
        hit = self._exact.get(step)
        if hit is None:
            hit = self._exact[step] = self._price(step)
        return hit

    def uniform(self, work: RankWork) -> StepCost:
        """Exact price of a step with the same work on every DP rank."""
        return self.price(Step.uniform(self.ranks, work))

    def decode(self, batch, ctx, total: float | None = None, admitted: int = 0, finished: int = 0) -> float:
        """Period of a decode step with per-rank running sequences and context sums (sequences of
        numbers over the DP ranks; `total`: their batch sum, when the caller keeps it); `admitted`,
        `finished`: requests the step starts and ends on the instance (priced where the host block
        has per-request terms, else ignored)."""
        self.calls += 1
        if self.ranks == 1:
            r = 0
        elif ctx.__class__ is np.ndarray:  # the decode instances' arrays (_slowest_rank, inlined, in a buffer:
            buf = self._slow  # batch x 1e6 + ctx, the same floats as ctx + batch x 1e6)
            if buf is None or len(buf) != len(ctx):
                buf = self._slow = np.empty(len(ctx))
            np.multiply(batch, 1e6, out=buf)
            buf += ctx
            r = int(buf.argmax())
        else:
            r = _slowest_rank(batch, ctx)
        b_max = int(batch[r])
        total = float(sum(batch)) if total is None else float(total)
        c = float(ctx[r]) / (b_max or 1)  # (Python floats; _qlog inlined)
        key = (b_max, round(_log(c) / LOG_STEP) if c >= 1 else -1, round(_log(total) / LOG_STEP) if total >= 1 else -1)
        if self.turnover:
            key += (admitted, finished)
        hit = self._cache.get(key)
        if hit is not None:
            if self._rng is None:  # (_value, inlined)
                return hit
            if not hit[1]:
                v = hit[0]
            else:
                if not self._z:
                    self._z = np.clip(self._rng.standard_normal(4096), -3.0, 3.0).tolist()
                v = hit[0] + hit[1] * self._z.pop()
            return v if self._spread is None else v * self._spread.decode()
        self.misses += 1
        rep_ctx, tot = _unq(key[1], LOG_STEP), _unq(key[2], LOG_STEP)
        # the other ranks' mean batch, never above the slowest rank's: the quantised total can exceed the
        # real one by 0.5%, and a fractional batch above b_max pads the measured GEMM curves to their next
        # tile (at b_max 128 on DEP64, a 1.3% slower step than the estimate's: test_one_pipeline)
        other = min(max(tot - b_max, 0.0) / max(self.ranks - 1, 1), float(b_max))
        works = [(RankWork(float(b_max), b_max * rep_ctx), 1)]
        if self.ranks > 1:
            works.append((RankWork(other, other * rep_ctx), self.ranks - 1))
        step = _merged(works)
        if self.turnover:
            step = Step(step.works, step.ranks, admitted=float(admitted), finished=float(finished))
        hit = self._cache[key] = self._period(step)
        v = self._value(hit)
        return v if self._spread is None else v * self._spread.decode()

    def step(self, chunks, batch=None, ctx=None) -> float:
        """Period of a prefill or mixed step: per rank, chunks as (rid, new tokens, prefix tokens),
        and (mixed) the running decode sequences and context sums (decode part quantised like
        `decode`)."""
        self.calls += 1
        key = []
        step_p = LOG_STEP_PREFILL
        for r, ch in enumerate(chunks):
            b = int(batch[r]) if batch is not None else 0
            c = _qlog(ctx[r] / max(b, 1), LOG_STEP) if batch is not None else -1
            if ch:
                tok = pairs = 0  # their sums over the rank's chunks, in one loop
                for _, take, start in ch:
                    tok += take
                    pairs += take * (start + take / 2.0)
                # (_qlog of the tokens and pairs, inlined: Python floats)
                qt = round(_log(float(tok)) / step_p) if tok >= 1 else -1
                key.append((b, c, qt, len(ch), round(_log(float(pairs)) / step_p) if pairs >= 1 else -1))
            else:
                key.append((b, c, -1, 0, -1))
        # the step is symmetric in its ranks (slowest rank, sum and max of tokens): sort them
        key = tuple(sorted(key))
        hit = self._cache.get(key)
        if hit is None:
            self.misses += 1
            hit = self._cache[key] = self._period(_merged(self._rank_works(key)))
        v = self._value(hit)
        return v if self._spread is None else v * self._spread.prefill()

    def _rank_works(self, key: tuple) -> list[tuple[RankWork, int]]:
        """A prefill / mixed step's representative rank works, one per rank key."""
        works = []
        for rank_key in key:
            w = self._works.get(rank_key)
            if w is None:
                w = self._works[rank_key] = _rank_work(*rank_key)
            works.append((w, 1))
        return works


def _rank_work(dec_b: int, dec_c: int, qt: int, nseq: int, qp: int) -> RankWork:
    """The representative rank work of one rank's part of a prefill / mixed step's key: its decode
    sequences at the bucket's mean context, `nseq` equal chunks with the bucket's tokens and pairs."""
    tok, pairs = _unq(qt, LOG_STEP_PREFILL), _unq(qp, LOG_STEP_PREFILL)
    n = tok / max(nseq, 1)
    p = max(pairs / max(tok, 1e-9) - n / 2.0, 0.0)
    chunks = ((nseq, n, p),) if nseq else ()
    return RankWork(float(dec_b), _unq(dec_c, LOG_STEP) * dec_b, chunks)


def _slowest_rank(batch, ctx) -> int:
    """The rank with the largest batch (then context): argmax of ctx + batch x 1e6."""
    if isinstance(ctx, np.ndarray):
        return int((ctx + batch * 1e6).argmax())
    return int(np.argmax(np.asarray(ctx) + np.asarray(batch) * 1e6))


def _merged(works: list[tuple[RankWork, int]]) -> Step:
    """A Step from (work, ranks) pairs, equal works merged (first occurrence keeps its place)."""
    merged: dict[RankWork, int] = {}
    for w, n in works:
        merged[w] = merged.get(w, 0) + n
    return Step(tuple(merged), tuple(merged.values()))
