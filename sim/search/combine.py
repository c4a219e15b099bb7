"""Whole deployments from priced instance shapes: pools sized and rate-matched, SLOs estimated.

Disaggregated: n_p prefill instances and n_d decode instances serve
rate = min(n_p * prefill rate within the TTFT budget, n_d * decode rate at its max batch);
the decode pool then runs at the batch that rate implies (TPOT from the step table), and TTFT
adds the prefill queue at its utilisation, the KV transfer and the first decode step.
Aggregated: replicas of one instance, each at its own steady state.
Two modes: at each deployment's own SLO-bound capacity (max tokens/s/GPU), or at a fixed
target rate (min GPUs, max tokens/s/user).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from rackplan.specs import SLO, Layout

from .estimate import DETERMINISTIC, DecodeUnit, PrefillUnit, Pricer, Traffic, interp
from .pools import decode_pool_counts

SLO_MARGIN = 0.9  # plan estimates to 90% of each SLO: the simulator's tails are the real test
WAIT_TAIL = math.log(10.0)  # p90 / mean of an exponential wait


Pool = tuple[Layout, dict]  # a priced shape and the fields (replicas, limits) its deployment sets


class Candidate:
    """One deployment and its estimated steady state at `rate_rps`. Its layouts are built the first
    time they are read: a search streams hundreds of thousands of candidates and keeps a few."""

    __slots__ = ("gpus", "rate_rps", "ttft_p90_s", "tpot_s", "batch_per_rank", "osl", "capacity_rps", "_pools",
                 "_kind", "_layouts", "_summary")

    def __init__(self, kind: str, pools: tuple[Pool, ...], gpus: int, rate_rps: float, ttft_p90_s: float,
                 tpot_s: float, batch_per_rank: float, osl: float, capacity_rps: float, summary: str | None = None):
        self._kind, self._pools = kind, pools  # kind: "disaggregated" (prefill pool, decode pool) or "aggregated"
        self.gpus, self.rate_rps, self.ttft_p90_s, self.tpot_s = gpus, rate_rps, ttft_p90_s, tpot_s
        self.batch_per_rank = batch_per_rank  # operating decode batch
        self.osl = osl
        # what the pools serve at full steps and the largest batch (req/s, the cost model's capacity):
        # the verification's upper bound
        self.capacity_rps = capacity_rps
        self._layouts: tuple | None = None
        self._summary = summary  # (None: from the layouts, when first read)

    def _built(self) -> tuple[Layout, ...]:
        if self._layouts is None:
            self._layouts = tuple(replace(lay, **changes) for lay, changes in self._pools)
        return self._layouts

    @property
    def prefill(self) -> tuple[Layout, ...]:
        return self._built()[:1] if self._kind == "disaggregated" else ()

    @property
    def decode(self) -> tuple[Layout, ...]:
        return self._built()[1:] if self._kind == "disaggregated" else ()

    @property
    def aggregated(self) -> tuple[Layout, ...]:
        return self._built() if self._kind == "aggregated" else ()

    @property
    def tps_gpu(self) -> float:
        """Output tokens/s per GPU used."""
        return self.rate_rps * self.osl / self.gpus

    @property
    def tps_user(self) -> float:
        """Output tokens/s one request sees while decoding."""
        return 1.0 / self.tpot_s

    @property
    def capacity_tps_gpu(self) -> float:
        """Output tokens/s per GPU at the cost model's pool capacity."""
        return self.capacity_rps * self.osl / self.gpus

    @property
    def summary(self) -> str:
        if self._summary is None:
            def pool(lays):
                return " + ".join(f"{lay.replicas}x{_tag(lay)}" for lay in lays)
            self._summary = (_disagg_summary(pool(self.prefill), pool(self.decode)) if self.decode
                             else f"aggregated {pool(self.aggregated)}")
        return self._summary

    def sort_key(self):
        """Deterministic order: best tokens/s/GPU, then per user, then fewer GPUs, then name."""
        return (-round(self.tps_gpu, 6), -round(self.tps_user, 6), self.gpus, self.summary)


def _disagg_summary(prefill: str, decode: str) -> str:
    """A disaggregated candidate's summary from its pools' parts (Candidate.summary; Family builds it from tags)."""
    return f"prefill {prefill} | decode {decode}"


def _tag(lay: Layout) -> str:
    """Shape plus the features that distinguish variants (for tables and dedup)."""
    parts = [lay.tag]
    if lay.role != "prefill":
        parts.append(f"b{lay.max_batch_per_rank}")
    if lay.role != "decode":
        parts.append(f"c{lay.max_tokens_per_step}")
    if lay.speculation:
        parts.append(f"mtp{lay.speculation.num_tokens}")
    if lay.eplb.redundant_experts:
        parts.append(f"eplb{lay.eplb.redundant_experts}")
    if lay.dbo:
        parts.append("dbo")
    if lay.api_servers is not None:
        parts.append(f"api{lay.api_servers}")
    if lay.stream_interval != 1:
        parts.append(f"si{lay.stream_interval}")
    if not lay.cuda_graphs:
        parts.append("eager")
    if not lay.async_scheduling:
        parts.append("sync")
    return "/".join(parts)


def best_prefill_per_size(units: list[PrefillUnit], budget_s: float) -> list[tuple[PrefillUnit, float]]:
    """Per instance GPU count, the prefill shape with the highest rate within the TTFT budget."""
    best: dict[int, tuple[PrefillUnit, float]] = {}
    for u in units:
        r = u.max_rate(budget_s)
        if r > 0 and (u.gpus not in best or r > best[u.gpus][1]):
            best[u.gpus] = (u, r)
    return [best[g] for g in sorted(best)]


@dataclass(frozen=True)
class Setting:
    """What the combiner needs besides the units."""

    num_gpus: int
    slo: SLO
    traffic: Traffic
    target_rps: float | None = None  # None: each deployment at its own capacity


def _transfer_s(pr: Pricer, gpus: int, tr: Traffic) -> float:
    return pr.transfer_s(tr.isl, gpus <= pr.hw.domain_size)


def disaggregated(pr: Pricer, prefills: list[tuple[PrefillUnit, float]], dec: DecodeUnit,
                  st: Setting) -> Iterator[Candidate]:
    """Deployments of one decode shape (every max batch on its grid) with each prefill shape. At a
    deployment's own capacity (no target rate) the whole decode shape's candidates are fitted at once
    (`family`, numpy over the candidates); at a target rate each one by `_disagg_candidate`."""
    if st.target_rps is None:
        yield from family(pr, prefills, dec, st) or ()
        return
    for top in range(len(dec.batches)):
        if dec.tpot(top) > SLO_MARGIN * st.slo.tpot_p90_s:
            break  # larger batches only get slower
        d_rate = dec.rate(top)
        for pu, p_rate in prefills:
            for n_p, n_d in _pool_sizes(pu.gpus, dec.gpus, p_rate, d_rate, st):
                cand = _disagg_candidate(pr, pu, n_p, dec, n_d, top, p_rate, d_rate, st)
                if cand is not None:
                    yield cand


def _pool_sizes(g_p: int, g_d: int, p_rate: float, d_rate: float, st: Setting):
    """(n_p, n_d) pool sizes to try within the GPU budget (n_d: sim/search/pools.py)."""
    if st.target_rps is not None:
        n_p, n_d = math.ceil(st.target_rps / p_rate), math.ceil(st.target_rps / d_rate)
        if n_p * g_p + n_d * g_d <= st.num_gpus:
            yield n_p, n_d
        return
    for n_d in decode_pool_counts(g_p, g_d, d_rate / p_rate, st.num_gpus):
        match = max(1, math.ceil(n_d * d_rate / p_rate))
        for n_p in sorted({match, max(1, match - 1)}):
            if n_p * g_p + n_d * g_d <= st.num_gpus:
                yield n_p, n_d


def decode_wait_p90(rate_rps: float, slots: float, service_s: float) -> float:
    """p90 wait (s) for a decode slot: M/M/c with c = running-sequence slots of the pool and a
    request's decode time as service (Sakasegawa's mean wait x ln 10 for the tail)."""
    rho = rate_rps * service_s / slots
    if rho >= 1.0:
        return math.inf
    return WAIT_TAIL * service_s * rho ** (math.sqrt(2.0 * (slots + 1.0)) - 1.0) / (slots * (1.0 - rho))


FIT_HALVINGS = 20  # the rate's resolution: 2^-20 of [0, rate_hi], by halving
FIT_NARROW = 10  # regula falsi evaluations at most before the halvings (fewer once they bracket a halving)


def fit_rate(ttft_at, rate_hi: float, limit_s: float) -> tuple[float, float]:
    """(highest rate <= rate_hi whose TTFT stays within limit_s, its TTFT) by FIT_HALVINGS halvings of
    [0, rate_hi] (TTFT grows with rate); (0, inf) if none. A halving's rate at or below a rate already
    seen to pass, or at or above one seen to fail, is decided without evaluating it (TTFT is
    non-decreasing in rate), and regula falsi (Illinois) first narrows that bracket to about the
    halvings' resolution: the result is the plain bisection's, bit for bit, from ~8 evaluations instead
    of ~17 (the estimate fits every candidate: 519,208 at 10,000 GPUs). The TTFT returned is one
    evaluated at that rate (ttft_at is pure: no rate is evaluated twice)."""
    top = ttft_at(rate_hi)
    if top <= limit_s:
        return rate_hi, top
    seen = {rate_hi: top}
    inv = 1.0 / limit_s  # regula falsi on 1/limit_s - 1/TTFT: near linear where a queue's wait blows up, finite at inf
    a, b = 0.0, rate_hi  # a passes (0.0: none seen yet), b fails
    fa, fb = math.nan, inv - 1.0 / top  # an end kept twice in a row has its value halved (Illinois)
    width, kept = rate_hi * 2.0 ** -FIT_HALVINGS, 0  # kept: +1 a kept last time, -1 b kept
    for _ in range(FIT_NARROW):
        if b - a <= width:
            break
        r = (a + b) / 2 if a == 0.0 else a - fa * (b - a) / (fb - fa)
        if not a < r < b:
            r = (a + b) / 2
        t = seen[r] = ttft_at(r)
        if t <= limit_s:
            a, fa = r, inv - 1.0 / t  # (a TTFT is a positive time)
            if kept == -1:
                fb /= 2
            kept = -1
        else:
            b, fb = r, inv - 1.0 / t
            if kept == 1:
                fa /= 2
            kept = 1
    lo, hi = 0.0, rate_hi
    for _ in range(FIT_HALVINGS):
        mid = (lo + hi) / 2
        if mid <= a:
            lo = mid
        elif mid >= b:
            hi = mid
        elif (t := ttft_at(mid)) <= limit_s:  # (undecided: never seen, as every seen rate is <= a or >= b)
            seen[mid] = t
            lo = a = mid
        else:
            seen[mid] = t
            hi = b = mid
    if lo <= 0.0:
        return 0.0, math.inf
    return lo, seen[lo] if lo in seen else ttft_at(lo)


def _disagg_candidate(pr, pu: PrefillUnit, n_p: int, dec: DecodeUnit, n_d: int, top: int,
                      p_rate: float, d_rate: float, st: Setting) -> Candidate | None:
    gpus = n_p * pu.gpus + n_d * dec.gpus
    transfer = _transfer_s(pr, gpus, st.traffic)
    slots = n_d * dec.layout.dp * dec.batches[top]
    at_rate, prefill_p90, acc, osl = dec.at_rate, pu.ttft_p90, dec.acceptance, st.traffic.osl
    p_cap = n_p * pu.capacity_rps

    def ttft_at(rate: float) -> float:
        _, tpot = at_rate(rate / n_d, top)
        return prefill_p90(rate / p_cap) + transfer + tpot * acc + decode_wait_p90(rate, slots, osl * tpot)

    limit = SLO_MARGIN * st.slo.ttft_p90_s
    if st.target_rps is not None:
        ttft = ttft_at(st.target_rps)
        rate = st.target_rps if ttft <= limit else 0.0
    else:
        rate, ttft = fit_rate(ttft_at, min(n_p * p_rate, n_d * d_rate), limit)
    if rate <= 0:
        return None
    batch, tpot = at_rate(rate / n_d, top)
    if tpot > SLO_MARGIN * st.slo.tpot_p90_s:
        return None
    pools = ((pu.layout, {"replicas": n_p}),
             (dec.layout, {"replicas": n_d, "max_batch_per_rank": dec.batches[top],
                           "max_tokens_per_step": max(dec.layout.max_tokens_per_step, _decode_tokens(dec, top))}))
    return Candidate("disaggregated", pools, gpus, rate, ttft, tpot, batch, osl, min(p_cap, n_d * d_rate))


def _decode_tokens(dec: DecodeUnit, top: int) -> int:
    """The largest decode step's tokens per rank at the chosen batch (the layout's max_decode_tokens once the
    batch is its max_batch_per_rank)."""
    return int(dec.layout.decode_tokens(dec.batches[top]))


# -- the same estimate over arrays: one decode shape's candidates at once ---------------------------
# Every operation below is the scalar path's (the same IEEE operations in the same order, logarithms and
# powers by Python's own math on each element), so each candidate's figures are _disagg_candidate's bit
# for bit (tests/unit/test_search.py); numpy only removes the per-candidate interpreter work.

def _bisect_right(xs: np.ndarray, x: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """bisect.bisect_right(xs, x[i], 0, hi[i]) for every i: numpy's search where xs is sorted (the insertion
    point within a prefix is then the whole table's, capped), else the same halvings in lockstep."""
    if not (xs[1:] < xs[:-1]).any():
        return np.minimum(np.searchsorted(xs, x, side="right"), hi)
    lo, hi = np.zeros_like(hi), hi.copy()
    while True:
        act = lo < hi
        if not act.any():
            return lo
        mid = (lo + hi) // 2
        left = x < xs[np.minimum(mid, len(xs) - 1)]
        hi = np.where(act & left, mid, hi)
        lo = np.where(act & ~left, mid + 1, lo)


def _interp_many(x: np.ndarray, xs: np.ndarray, ys: np.ndarray, top: np.ndarray) -> np.ndarray:
    """estimate.interp(x[i], xs, ys, top[i]) for every i."""
    j = _bisect_right(xs, x, top + 1) - 1
    last = len(xs) - 1
    jj, j1 = j, np.minimum(j + 1, last)  # (j >= -1)
    flat = (j >= top) | (xs[jj] == x)
    with np.errstate(divide="ignore", invalid="ignore"):  # (the flat ones' slope is not used)
        out = (ys[j1] - ys[jj]) / (xs[j1] - xs[jj]) * (x - xs[jj]) + ys[jj]
    return np.where(flat, ys[np.where(j < top, jj, top)], out)


class _Table:
    """A decode unit's step table as arrays (DecodeUnit.at_rate over many rates)."""

    def __init__(self, dec: DecodeUnit):
        self.rates = np.array(dec.rates)
        self.batches = np.array(dec.batches, dtype=float)
        self.steps = np.array(dec.step_s)
        self.acc = dec.acceptance

    def at_rate(self, rate: np.ndarray, top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """DecodeUnit.at_rate(rate[i], top[i]): (operating batch, TPOT s) for every i."""
        rates, batches, steps, acc = self.rates, self.batches, self.steps, self.acc
        high, low = rate >= rates[top], rate <= rates[0]
        b = np.where(high, batches[top], batches[0])
        tpot = np.where(high, steps[top] / acc, steps[0] / acc)
        mid = ~(high | low)
        if mid.any():
            i = np.flatnonzero(mid)
            bm = _interp_many(rate[i], rates, batches, top[i])
            b[i], tpot[i] = bm, _interp_many(bm, batches, steps, top[i]) / acc
        return b, tpot


def _each(fn, *cols: np.ndarray) -> np.ndarray:
    """fn over the elements with Python floats (math's logarithm and power, as the scalar path)."""
    return np.array([fn(*v) for v in zip(*(c.tolist() for c in cols))], dtype=float)


def fit_rates(ttft_at: Callable[[np.ndarray, np.ndarray], np.ndarray], rate_hi: np.ndarray,
              limit_s: float) -> tuple[np.ndarray, np.ndarray]:
    """fit_rate for many candidates in lockstep: ttft_at(ix, rates) is the TTFT of candidates ix at
    rates (arrays); (rates, TTFTs) as fit_rate gives each, bit for bit (its regula falsi steps and
    halvings, the same rates evaluated)."""
    n = len(rate_hi)
    top = ttft_at(np.arange(n), rate_hi)
    done = top <= limit_s
    inv = 1.0 / limit_s
    a, b = np.zeros(n), rate_hi.copy()
    fa, fb = np.full(n, math.nan), inv - 1.0 / top
    width, kept = rate_hi * 2.0 ** -FIT_HALVINGS, np.zeros(n, dtype=np.int8)
    live = ~done
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(FIT_NARROW):
            live &= b - a > width
            i = np.flatnonzero(live)
            if not len(i):
                break
            ai, bi, fai, fbi = a[i], b[i], fa[i], fb[i]
            r = np.where(ai == 0.0, (ai + bi) / 2, ai - fai * (bi - ai) / (fbi - fai))
            r = np.where((ai < r) & (r < bi), r, (ai + bi) / 2)
            t = ttft_at(i, r)
            ok, f = t <= limit_s, inv - 1.0 / t
            k = kept[i]
            a[i], fa[i] = np.where(ok, r, ai), np.where(ok, f, np.where(k == 1, fai / 2, fai))
            b[i], fb[i] = np.where(ok, bi, r), np.where(ok, np.where(k == -1, fbi / 2, fbi), f)
            kept[i] = np.where(ok, -1, 1)
    lo, hi = np.zeros(n), rate_hi.copy()
    t_lo = np.full(n, math.nan)  # TTFT evaluated at lo (nan: lo was decided without it)
    for _ in range(FIT_HALVINGS):
        mid = (lo + hi) / 2
        up, down = mid <= a, mid >= b
        lo, t_lo = np.where(up, mid, lo), np.where(up, math.nan, t_lo)
        hi = np.where(~up & down, mid, hi)
        i = np.flatnonzero(~(up | down | done))
        if len(i):
            t = ttft_at(i, mid[i])
            ok = t <= limit_s
            p, q = i[ok], i[~ok]
            lo[p] = a[p] = mid[p]
            t_lo[p] = t[ok]
            hi[q] = b[q] = mid[q]
    rate = np.where(done, rate_hi, np.where(lo <= 0.0, 0.0, lo))
    ttft = np.where(done, top, np.where(lo <= 0.0, math.inf, t_lo))
    i = np.flatnonzero(~done & (lo > 0.0) & np.isnan(t_lo))
    if len(i):
        ttft[i] = ttft_at(i, lo[i])
    return rate, ttft


def _queue_wait(rho: np.ndarray, capacity_rps: np.ndarray) -> np.ndarray:
    """estimate.queue_wait_p90 for every element."""
    out = np.where(rho >= 1.0, math.inf, 0.0)
    i = np.flatnonzero((rho > 0.1) & (rho < 1.0))
    if len(i):
        r = rho[i]
        out[i] = DETERMINISTIC * _each(math.log, 10.0 * r) / (capacity_rps[i] * (1.0 - r))
    return out


def _decode_wait(rate: np.ndarray, slots: np.ndarray, service_s: np.ndarray, power: np.ndarray) -> np.ndarray:
    """decode_wait_p90 for every element (power: its exponent sqrt(2 (slots + 1)) - 1)."""
    rho = rate * service_s / slots
    out = np.full(len(rho), math.inf)
    i = np.flatnonzero(rho < 1.0)
    if len(i):
        r = rho[i]
        out[i] = WAIT_TAIL * service_s[i] * _each(pow, r, power[i]) / (slots[i] * (1.0 - r))
    return out


def family(pr: Pricer, prefills: list[tuple[PrefillUnit, float]], dec: DecodeUnit, st: Setting) -> Family | None:
    """`_disagg_candidate` for every (max batch, prefill shape, pool sizes) of one decode shape at its own
    capacity (st.target_rps None), in disaggregated's order, computed over arrays; None when there are none."""
    rows = []  # (top, prefill index, n_p, n_d) columns, the scalar loop's order
    for top in range(len(dec.batches)):
        if dec.tpot(top) > SLO_MARGIN * st.slo.tpot_p90_s:
            break
        d_rate = dec.rate(top)
        for k, (pu, p_rate) in enumerate(prefills):
            n_p, n_d = _pool_size_columns(pu.gpus, dec.gpus, p_rate, d_rate, st.num_gpus)
            rows.append((np.full(len(n_p), top), np.full(len(n_p), k), n_p, n_d))
    if not rows or not sum(len(r[0]) for r in rows):
        return None
    top, kp, n_p, n_d = (np.concatenate(col) for col in zip(*rows, strict=True))
    units = [pu for pu, _ in prefills]
    cap1 = np.array([pu.capacity_rps for pu in units])[kp]
    light = np.array([pu.light_s for pu in units])[kp]
    span = np.array([pu.full_s - pu.light_s for pu in units])[kp]
    p_rate = np.array([r for _, r in prefills])[kp]
    gpus = n_p * np.array([pu.gpus for pu in units])[kp] + n_d * dec.gpus
    transfer = np.where(gpus <= pr.hw.domain_size, pr.transfer_s(st.traffic.isl, True),
                        pr.transfer_s(st.traffic.isl, False))
    slots = (n_d * dec.layout.dp * np.array(dec.batches)[top]).astype(float)
    power = np.sqrt(2.0 * (slots + 1.0)) - 1.0
    p_cap, nd = n_p * cap1, n_d.astype(float)
    d_rates = np.array(dec.rates)[top]
    table, acc, osl = _Table(dec), dec.acceptance, st.traffic.osl

    def ttft_at(i: np.ndarray, rate: np.ndarray) -> np.ndarray:  # combine's ttft_at for candidates i
        _, tpot = table.at_rate(rate / nd[i], top[i])
        rho = rate / p_cap[i]
        prefill = light[i] + rho * span[i] + _queue_wait(rho, cap1[i])
        return prefill + transfer[i] + tpot * acc + _decode_wait(rate, slots[i], osl * tpot, power[i])

    rate, ttft = fit_rates(ttft_at, np.minimum(n_p * p_rate, n_d * d_rates), SLO_MARGIN * st.slo.ttft_p90_s)
    batch, tpot = table.at_rate(rate / nd, top)
    keep = np.flatnonzero((rate > 0) & ~(tpot > SLO_MARGIN * st.slo.tpot_p90_s))
    capacity = np.minimum(p_cap, n_d * d_rates)
    return Family(dec, [pu.layout for pu in units], osl, *(col[keep] for col in (top, kp, n_p, n_d, gpus, rate, ttft,
                                                                                 tpot, batch, capacity)))


def _pool_size_columns(g_p: int, g_d: int, p_rate: float, d_rate: float, num_gpus: int) -> tuple[np.ndarray, ...]:
    """_pool_sizes at a deployment's own capacity as (n_p, n_d) columns, in its order."""
    n_d = np.fromiter(decode_pool_counts(g_p, g_d, d_rate / p_rate, num_gpus), dtype=np.int64)
    match = np.maximum(1, np.ceil(n_d * d_rate / p_rate)).astype(np.int64)
    n_p = np.stack([np.maximum(1, match - 1), match], axis=1)  # sorted({match, max(1, match - 1)}) per n_d
    ok = np.stack([np.ones(len(n_d), dtype=bool), match > 1], axis=1) & (n_p * g_p + n_d[:, None] * g_d <= num_gpus)
    return n_p[ok], np.repeat(n_d, 2).reshape(-1, 2)[ok]


class Family:
    """The candidates of one decode shape at their own capacity (`family`), as columns: `candidate(i)` builds
    the i-th; iterating gives them all, in order. `tps_user` and `tps_gpu` are the candidates' properties of the
    same names, every one (the estimate stage skips the ones its front already beats)."""

    def __init__(self, dec: DecodeUnit, prefill_layouts: list[Layout], osl: float, *cols: np.ndarray):
        self._dec, self._prefill, self._osl = dec, prefill_layouts, osl
        self._cols = cols  # top, prefill index, n_p, n_d, gpus, rate, ttft, tpot, batch, capacity
        self._rows: list | None = None
        self._decode_tokens = [max(dec.layout.max_tokens_per_step, _decode_tokens(dec, t))
                               for t in range(len(dec.batches))]
        self._tags: tuple[list[str], list[str]] | None = None  # the summary's shape tags: prefill, decode per top
        _, _, _, _, gpus, rate, _, tpot, _, _ = cols
        self.tps_user = 1.0 / tpot
        self.tps_gpu = rate * osl / gpus

    def __len__(self) -> int:
        return len(self._cols[0])

    def candidate(self, i: int) -> Candidate:
        if self._rows is None:
            self._rows = list(zip(*(col.tolist() for col in self._cols), strict=True))
            dec = self._dec
            self._tags = ([_tag(lay) for lay in self._prefill],
                          [_tag(replace(dec.layout, max_batch_per_rank=b, max_tokens_per_step=n))
                           for b, n in zip(dec.batches, self._decode_tokens, strict=True)])
        t, k, n_p, n_d, gpus, rate, ttft, tpot, batch, capacity = self._rows[i]
        dec, (p_tags, d_tags) = self._dec, self._tags
        pools = ((self._prefill[k], {"replicas": n_p}),
                 (dec.layout, {"replicas": n_d, "max_batch_per_rank": dec.batches[t],
                               "max_tokens_per_step": self._decode_tokens[t]}))
        return Candidate("disaggregated", pools, gpus, rate, ttft, tpot, batch, self._osl, capacity,
                         _disagg_summary(f"{n_p}x{p_tags[k]}", f"{n_d}x{d_tags[t]}"))

    def __iter__(self) -> Iterator[Candidate]:
        return (self.candidate(i) for i in range(len(self)))


def aggregated(agg: DecodeUnit, st: Setting) -> Iterator[Candidate]:
    """Replicated aggregated instances, one deployment per max batch on the grid."""
    limit = SLO_MARGIN * st.slo.ttft_p90_s
    for top in range(len(agg.batches)):
        inst_rate = agg.rate(top)
        n = st.num_gpus // agg.gpus if st.target_rps is None else math.ceil(st.target_rps / inst_rate)
        if n < 1 or n * agg.gpus > st.num_gpus:
            continue
        slots = n * agg.layout.dp * agg.batches[top]

        def ttft_at(rate: float, n=n, top=top, slots=slots) -> float:
            batch, tpot = agg.at_rate(rate / n, top)
            first = interp(batch, agg.batches, agg.first_token_s, top)
            return first + decode_wait_p90(rate, slots, st.traffic.osl * tpot)
        if st.target_rps is None:
            rate, ttft = fit_rate(ttft_at, n * inst_rate, limit)
        else:
            ttft = ttft_at(st.target_rps)
            rate = st.target_rps if ttft <= limit else 0.0
        if rate <= 0:
            continue
        batch, tpot = agg.at_rate(rate / n, top)
        if tpot > SLO_MARGIN * st.slo.tpot_p90_s:
            continue
        pools = ((agg.layout, {"replicas": n, "max_batch_per_rank": agg.batches[top]}),)
        yield Candidate("aggregated", pools, n * agg.gpus, rate, ttft, tpot, batch, st.traffic.osl, n * inst_rate)
