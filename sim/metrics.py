"""Per-request timestamps and the summary a person reads: latency percentiles, tokens/s per GPU
and per user, utilisation per instance, goodput under the SLOs."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rackplan.specs import SLO


class RequestLog:
    """Timestamps of every request (NaN until set) and the time-integral of requests in system."""

    def __init__(self, n: int):
        self.arrival = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.prefill_done = np.full(n, np.nan)
        self.in_system = 0
        self._area = 0.0
        self._last_t = 0.0
        self.step_durations: list[float] = []  # decode step seconds (one ITL sample per sequence)
        self.step_seqs: list[int] = []
        self.step_end: list[float] = []  # decode step end times
        self.step_tokens: list[float] = []  # output tokens emitted by that step

    def _tick(self, now: float) -> None:
        self._area += self.in_system * (now - self._last_t)
        self._last_t = now

    def arrive(self, rid: int, now: float) -> None:
        self._tick(now)
        self.in_system += 1
        self.arrival[rid] = now

    def done(self, rid: int, now: float) -> None:
        self._tick(now)
        self.in_system -= 1
        self.finish[rid] = now

    def mean_in_system(self, t0: float, t1: float) -> float:
        return self._area / max(t1 - t0, 1e-12)


@dataclass(frozen=True)
class SimResult:
    """What one simulation measured: per-request arrays plus the summary metrics."""

    metrics: dict[str, float]
    utilisation: dict[str, float]
    ttft_s: np.ndarray = field(repr=False)
    tpot_s: np.ndarray = field(repr=False)
    e2e_s: np.ndarray = field(repr=False)
    steps: dict[str, int] = field(default_factory=dict)


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs) -> list[float]:
    """Percentiles of `values` each repeated `weights` times (inverted CDF), without repeating."""
    if len(values) == 0 or weights.sum() <= 0:
        return [float("nan")] * len(qs)
    order = np.argsort(values, kind="stable")
    v, cw = values[order], np.cumsum(weights[order])
    return [float(v[min(np.searchsorted(cw, q / 100.0 * cw[-1], side="left"), len(v) - 1)]) for q in qs]


def summarise(log: RequestLog, isl: np.ndarray, osl: np.ndarray, cached: np.ndarray, gpus: int,
              slo: SLO, utilisation: dict[str, float], steps: dict[str, int],
              closed_loop: bool = False) -> SimResult:
    """Percentiles, throughput per GPU and per user, goodput, Little's-law check."""
    ttft = log.first_token - log.arrival
    e2e = log.finish - log.arrival
    tpot = np.where(osl > 1, (log.finish - log.first_token) / np.maximum(osl - 1, 1), np.nan)
    t0, t1 = float(np.nanmin(log.arrival)), float(np.nanmax(log.finish))
    dur = max(t1 - t0, 1e-12)
    # ITL: every running sequence sees each decode step's duration once (weighted by sequences)
    itl_v, itl_w = np.asarray(log.step_durations), np.asarray(log.step_seqs, dtype=float)
    # Steady-state throughput: the middle 80% of the arrival window (no warm-up, no drain);
    # closed-loop runs use the whole run.
    w0, w1 = (float(x) for x in np.nanpercentile(log.arrival, [10, 90]))
    window = w1 - w0
    ends = np.asarray(log.step_end)
    if not closed_loop and window > 0 and len(ends):
        in_win = (ends > w0) & (ends <= w1)
        out_tps = float(np.asarray(log.step_tokens)[in_win].sum()) / window
        arrived = (log.arrival > w0) & (log.arrival <= w1)
        in_tps = float(isl[arrived].sum()) / window
        pre_tps = float((isl - cached)[arrived].sum()) / window
    else:
        out_tps, in_tps, pre_tps = float(osl.sum()) / dur, float(isl.sum()) / dur, float((isl - cached).sum()) / dur
    m: dict[str, float] = {}
    for name, arr in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        pcts = np.nanpercentile(arr, (50, 90, 99)) if np.isfinite(arr).any() else [float("nan")] * 3
        for q, val in zip((50, 90, 99), pcts):
            m[f"{name}_p{q}_s"] = float(val)
        m[f"{name}_mean_s"] = float(np.nanmean(arr)) if np.isfinite(arr).any() else float("nan")
    for q, val in zip((50, 90, 99), weighted_percentiles(itl_v, itl_w, (50, 90, 99))):
        m[f"itl_p{q}_s"] = val
    m["itl_mean_s"] = float(np.dot(itl_v, itl_w) / itl_w.sum()) if itl_w.sum() > 0 else float("nan")
    ok = (ttft <= slo.ttft_p90_s) & ((osl <= 1) | (tpot <= slo.tpot_p90_s))
    speed = np.where(osl > 1, (osl - 1) / np.maximum(log.finish - log.first_token, 1e-12), np.nan)
    m.update(
        num_requests=float(len(isl)),
        duration_s=dur,
        num_gpus=float(gpus),
        request_rate=len(isl) / dur,
        output_tokens=float(osl.sum()),
        input_tokens=float(isl.sum()),
        output_tps_per_gpu=out_tps / gpus,
        input_tps_per_gpu=in_tps / gpus,
        prefill_tps_per_gpu=pre_tps / gpus,
        tps_per_user=float(np.nanmedian(speed)) if np.isfinite(speed).any() else float("nan"),
        goodput_rps=float(ok.sum()) / dur,
        slo_attainment=float(ok.mean()),
        mean_in_system=float(log.mean_in_system(t0, t1)),
        # prompt tokens served from prefix caches (the trace's block hashes, else the flat rate)
        prefix_hit_rate=float(cached.sum()) / max(float(isl.sum()), 1.0),
    )
    return SimResult(m, utilisation, ttft, tpot, e2e, steps)
