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
from collections.abc import Iterator
from dataclasses import dataclass, replace

from rackplan.specs import SLO, Layout

from .estimate import DecodeUnit, PrefillUnit, Pricer, Traffic, interp
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
                 tpot_s: float, batch_per_rank: float, osl: float, capacity_rps: float):
        self._kind, self._pools = kind, pools  # kind: "disaggregated" (prefill pool, decode pool) or "aggregated"
        self.gpus, self.rate_rps, self.ttft_p90_s, self.tpot_s = gpus, rate_rps, ttft_p90_s, tpot_s
        self.batch_per_rank = batch_per_rank  # operating decode batch
        self.osl = osl
        # what the pools serve at full steps and the largest batch (req/s, the cost model's capacity):
        # the verification's upper bound
        self.capacity_rps = capacity_rps
        self._layouts: tuple | None = None
        self._summary: str | None = None

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
            self._summary = (f"prefill {pool(self.prefill)} | decode {pool(self.decode)}" if self.decode
                             else f"aggregated {pool(self.aggregated)}")
        return self._summary

    def sort_key(self):
        """Deterministic order: best tokens/s/GPU, then per user, then fewer GPUs, then name."""
        return (-round(self.tps_gpu, 6), -round(self.tps_user, 6), self.gpus, self.summary)


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
    """Deployments of one decode shape (every max batch on its grid) with each prefill shape."""
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
