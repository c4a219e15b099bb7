"""Per-request timestamps and the summary a person reads, measured at steady state: latency
percentiles, served tokens/s per GPU (per pool and for the whole plan) and per user, requests/s
served against offered, goodput under the SLOs, utilisation per instance.

Every figure comes from the measurement window of sim/steady.py (warm-up and cool-down left
out): percentiles over the requests that arrive in it, throughput over the tokens served in it
(never the offered load). Whole-run totals (`output_tokens`, `duration_s`) are labelled as such.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from rackplan.specs import SLO

from .steady import Stability, Window, dot, measure, median, percentiles


class RequestLog:
    """Timestamps of every request (NaN until set) and what each decode step emitted."""

    def __init__(self, n: int):
        self.arrival = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.prefill_done = np.full(n, np.nan)
        self._views()
        # per decode step (arrays of machine numbers: 8 bytes a step, not a list's 32)
        self.step_durations = array("d")  # step seconds (one ITL sample per sequence)
        self.step_seqs = array("q")  # sequences that continued through it
        self.step_end = array("d")  # end times
        self.step_tokens = array("d")  # output tokens emitted

    def _views(self) -> None:
        # the simulator writes one timestamp at a time through memoryviews of the four arrays (a float
        # set in place, about half the cost of a numpy scalar assignment; the arrays see it)
        self._arrival, self._first_token = memoryview(self.arrival), memoryview(self.first_token)
        self._finish, self._prefill_done = memoryview(self.finish), memoryview(self.prefill_done)

    def arrive(self, rid: int, now: float) -> None:
        self._arrival[rid] = now

    def prefilled(self, rid: int, now: float) -> None:
        """The prompt of `rid` is prefilled (its KV leaves the prefill instance)."""
        self._prefill_done[rid] = now

    def first_tokens(self, rids, now: float) -> None:
        """The requests `rids` emitted their first token at `now`."""
        first = self._first_token
        for rid in rids:
            first[rid] = now

    def done(self, rid: int, now: float) -> None:
        self._finish[rid] = now

    def grow(self, n: int) -> None:
        """Room for `n` more requests (NaN timestamps): a continued run's new arrivals."""
        for name in ("arrival", "first_token", "finish", "prefill_done"):
            setattr(self, name, np.concatenate([getattr(self, name), np.full(n, np.nan)]))
        self._views()

    def head(self, n: int) -> "RequestLog":
        """The log of the first `n` requests (views, no copies) with every decode step so far."""
        out = RequestLog.__new__(RequestLog)
        out.__dict__.update(self.__dict__)
        for name in ("arrival", "first_token", "finish", "prefill_done"):
            setattr(out, name, getattr(self, name)[:n])
        return out

    def measure(self, disaggregated: bool, closed_loop: bool) -> tuple[Window, Stability]:
        """The measurement window and stability verdict of the run so far (sim/steady.py)."""
        return measure(self.arrival, self.prefill_done, self.first_token, self.finish, disaggregated, closed_loop)


@dataclass(frozen=True)
class Pools:
    """GPUs of each pool, for per-pool throughput (aggregated plans: one pool, all GPUs)."""

    total: int
    prefill: int
    decode: int


@dataclass(frozen=True)
class SimResult:
    """What one simulation measured: per-request arrays (every request) plus the steady-state
    summary over the window."""

    metrics: dict[str, float]
    utilisation: dict[str, float]
    ttft_s: np.ndarray = field(repr=False)
    tpot_s: np.ndarray = field(repr=False)
    e2e_s: np.ndarray = field(repr=False)
    steps: dict[str, int] = field(default_factory=dict)
    window: Window | None = None
    stability: Stability = field(default_factory=lambda: Stability(True))
    # (edges [B + 1], simulated seconds from 0, {pool: busy share [B]}): utilisation over the whole run, warm-up
    # and cool-down included (sim/simulator.py _Run.pool_busy)
    busy_over_time: tuple = field(default=(), repr=False)
    sessions: dict | None = field(default=None, repr=False)  # session figures (sim/sessions.session_figures)

    @property
    def stable(self) -> bool:
        return self.stability.stable


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs) -> list[float]:
    """Percentiles of `values` each repeated `weights` times (inverted CDF), without repeating."""
    if len(values) == 0 or weights.sum() <= 0:
        return [float("nan")] * len(qs)
    order = np.argsort(values, kind="stable")
    v, cw = values[order], np.cumsum(weights[order])
    return [float(v[min(np.searchsorted(cw, q / 100.0 * cw[-1], side="left"), len(v) - 1)]) for q in qs]


BATCHES = 20  # batch means: the window's requests in arrival order, cut into this many batches
MAX_LAG1 = 0.5  # batch means' lag-1 autocorrelation used at most (from 20 batches, a larger one is mostly noise)


def _percentiles(m: dict, name: str, arr: np.ndarray) -> None:
    """p50/p90/p99 and mean of `arr` (window requests in arrival order; NaN: none, +inf: longer
    than any finite one, e.g. the E2E of a request still running), and the standard error of the
    p90 (p90_standard_error: batch means, floored by the run's effective samples)."""
    arr = arr[~np.isnan(arr)]
    done = arr[np.isfinite(arr)]
    with np.errstate(invalid="ignore"):  # between two +inf: NaN, which is +inf too
        pcts = percentiles(arr, (50, 90, 99)) if len(arr) else [float("nan")] * 3
    for q, val in zip((50, 90, 99), pcts):
        m[f"{name}_p{q}_s"] = float(val) if len(done) == len(arr) or not np.isnan(val) else float("inf")
    m[f"{name}_mean_s"] = float(done.mean()) if len(done) and len(done) == len(arr) else float("nan")
    m[f"{name}_p90_se_s"] = p90_standard_error(arr) if len(done) == len(arr) else float("nan")


def p90_standard_error(arr: np.ndarray) -> float:
    """Standard error of the p90 of a series (in arrival order): by batch means over BATCHES
    consecutive batches (batch_standard_error), and never below what its effective number of
    independent samples would give (half the distribution-free 68% interval, the order statistics
    n(0.9 +- sqrt(0.09/n_eff)), n_eff = n / tau, tau the integrated autocorrelation time of the
    series' exceedances of its p90): near saturation one slow queue excursion delays dozens of
    consecutive requests, so a run of 2k requests holds only ~20 independent looks at its tail."""
    n = len(arr)
    if n < 10 * BATCHES:
        return float("nan")
    srt = np.sort(arr)
    q90 = srt[int(np.floor(0.9 * (n - 1)))]
    half = np.sqrt(0.09 * autocorrelation_time((arr > q90).astype(float)) / n)
    iid = (srt[min(n - 1, int(np.ceil(n * (0.9 + half))))] - srt[max(0, int(np.floor(n * (0.9 - half))))]) / 2.0
    p90s = np.array([percentiles(b, (90,))[0] for b in np.array_split(arr, BATCHES)])  # [BATCHES]
    return max(float(iid), batch_standard_error(p90s))


SOKAL_C = 5.0  # automatic window: autocorrelations summed up to the first lag M >= SOKAL_C x tau(M) (Sokal 1997)


def autocorrelation_time(x: np.ndarray) -> float:
    """Integrated autocorrelation time of a series, 1 + 2 sum of its autocorrelations (at least 1):
    the series holds len(x) / tau independent samples' worth. Summed over Sokal's automatic window
    (Sokal 1997, "Monte Carlo methods in statistical mechanics", sec. 3), autocorrelations by FFT."""
    n = len(x)
    d = x - x.mean()
    var = dot(d, d)
    if n < 4 or var <= 0.0:
        return 1.0
    size = _fast_length(2 * n)  # zero-padded past 2n: no wrap-around
    f = np.fft.rfft(d, size)
    acf = np.fft.irfft(f.real * f.real + f.imag * f.imag, size)[1:n] / var  # [n-1] lags 1..n-1
    taus = 1.0 + 2.0 * np.cumsum(acf)  # tau(M) summed to lag M
    within = np.arange(1, n) >= SOKAL_C * taus
    m = int(np.argmax(within)) if within.any() else n - 2
    return max(1.0, float(taus[m]))


def _fast_length(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n: an FFT length pocketfft does fast (2n itself may be near-prime)."""
    best, p5 = 1 << (n - 1).bit_length(), 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            size = p35 << max(0, (-(-n // p35) - 1).bit_length())  # p35 x the power of two that reaches n
            best, p35 = min(best, size), p35 * 3
        p5 *= 5
    return best


def batch_standard_error(y: np.ndarray) -> float:
    """Standard error of a mean from batch values: their spread over sqrt(batches), inflated for
    correlated batches as an AR(1) series would be (x (1 + r) / (1 - r), r their lag-1
    autocorrelation when positive): queues near saturation stay long or short for longer than a
    batch."""
    n = len(y)
    d = y - y.mean()
    var = dot(d, d) / (n - 1)
    r = dot(d[:-1], d[1:]) / max(dot(d, d), 1e-300) if var > 0 else 0.0
    r = min(max(r, 0.0), MAX_LAG1)
    return float(np.sqrt(var / n * (1.0 + r) / (1.0 - r)))


def _latency(m: dict, log: RequestLog, osl: np.ndarray, inw: np.ndarray, win: Window, slo: SLO,
             tpot_running: np.ndarray | None = None) -> None:
    """Percentiles, goodput and per-user speed over the window's requests; ITL over its decode
    steps. `tpot_running`: [R] TPOT so far of requests still running (NaN elsewhere)."""
    ttft = log.first_token - log.arrival
    tpot = np.where(osl > 1, (log.finish - log.first_token) / np.maximum(osl - 1, 1), np.nan)
    if tpot_running is not None:
        tpot = np.where(np.isnan(log.finish), tpot_running, tpot)
    e2e = np.where(np.isnan(log.finish), np.inf, log.finish - log.arrival)  # still running: +inf
    for name, arr in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        _percentiles(m, name, arr[inw])
    steps = _in(np.asarray(log.step_end), win)  # decode steps that ended in the window
    itl_v, itl_w = np.asarray(log.step_durations)[steps], np.asarray(log.step_seqs, dtype=float)[steps]
    for q, val in zip((50, 90, 99), weighted_percentiles(itl_v, itl_w, (50, 90, 99))):
        m[f"itl_p{q}_s"] = val
    m["itl_mean_s"] = dot(itl_v, itl_w) / float(itl_w.sum()) if itl_w.sum() > 0 else float("nan")
    ok = (ttft <= slo.ttft_p90_s) & ((osl <= 1) | (tpot <= slo.tpot_p90_s))
    speed = np.where(osl > 1, (osl - 1) / np.maximum(log.finish - log.first_token, 1e-12), np.nan)
    if tpot_running is not None:
        speed = np.where(np.isnan(log.finish), 1.0 / tpot_running, speed)
    speed = speed[inw]
    m["goodput_rps"] = float(ok[inw].sum()) / win.length_s
    m["slo_attainment"] = float(ok[inw].mean()) if inw.any() else float("nan")
    m["tps_per_user"] = median(speed[~np.isnan(speed)]) if np.isfinite(speed).any() else float("nan")


def _in(t: np.ndarray, win: Window) -> np.ndarray:
    return (t > win.start_s) & (t <= win.end_s)


def _throughput(m: dict, log: RequestLog, isl, cached, win: Window, pools: Pools, disaggregated: bool,
                closed_loop: bool, template: int) -> None:
    """Served tokens and requests per second in the window, per GPU of each pool and of the plan; the input
    figures count each prompt less its `template` tokens (prefilled, but not in a bench's input count)."""
    ends, toks = np.asarray(log.step_end), np.asarray(log.step_tokens)
    if not disaggregated:  # an aggregated prefill step emits the first token; decode steps the rest
        first = log.first_token[np.isfinite(log.first_token)]
        ends, toks = np.concatenate([ends, first]), np.concatenate([toks, np.ones(len(first))])
    inw = _in(ends, win)
    out_tps = float(toks[inw].sum()) / win.length_s
    # its standard error by batch means over BATCHES equal slices of the window
    edges = np.linspace(win.start_s, win.end_s, BATCHES + 1)
    per_slice = np.histogram(ends[inw], bins=edges, weights=toks[inw])[0] / (win.length_s / BATCHES)
    prompt_done = log.prefill_done if disaggregated else log.first_token  # prompt served
    served = _in(prompt_done, win)
    in_tps = float((isl[served] - template).sum()) / win.length_s
    pre_tps = float((isl - cached)[served].sum()) / win.length_s
    m.update(
        output_tps_per_gpu=out_tps / pools.total,
        # open loop: never below the arrivals' own noise (a window of n Poisson arrivals holds n +- sqrt(n))
        output_tps_per_gpu_se=max(batch_standard_error(per_slice),
                                  0.0 if closed_loop else out_tps / np.sqrt(max(win.requests, 1))) / pools.total,
        input_tps_per_gpu=in_tps / pools.total,
        prefill_tps_per_gpu=pre_tps / pools.total,
        prefill_pool_input_tps_per_gpu=in_tps / pools.prefill,
        decode_pool_output_tps_per_gpu=out_tps / pools.decode,
        offered_rps=win.requests / win.length_s,
        served_rps=float(_in(log.finish, win).sum()) / win.length_s,
        prefill_served_rps=float(served.sum()) / win.length_s,
        decode_served_rps=float(_in(log.first_token, win).sum()) / win.length_s,
    )


def _mean_in_system(log: RequestLog, win: Window) -> float:
    """Time-average of requests in the system over the window (each request's stay clipped to it)."""
    finish = np.where(np.isfinite(log.finish), log.finish, np.inf)
    enter = np.where(np.isnan(log.arrival), log.first_token, log.arrival)  # seated at t = 0: never arrived
    stay = np.clip(np.minimum(finish, win.end_s) - np.maximum(enter, win.start_s), 0.0, None)
    return float(np.nansum(stay)) / win.length_s


def summarise(log: RequestLog, win: Window, stab: Stability, isl: np.ndarray, osl: np.ndarray,
              cached: np.ndarray, pools: Pools, slo: SLO, utilisation: dict[str, float], steps: dict[str, int],
              disaggregated: bool, closed_loop: bool = False, tpot_running: np.ndarray | None = None,
              template: int = 0) -> SimResult:
    """The steady-state summary of a run over its window: percentiles, throughput, goodput
    (`tpot_running`: the TPOT so far of requests still running, for a run measured while they run).
    [N] `isl`: the prompts as the engine prefills them, each with `template` chat-template tokens
    (Workload.template_tokens) that the input-token figures leave out."""
    inw = win.holds(log.arrival)
    m: dict[str, float] = {}
    _latency(m, log, osl, inw, win, slo, tpot_running)
    _throughput(m, log, isl, cached, win, pools, disaggregated, closed_loop, template)
    done = np.isfinite(log.finish)
    t0, t1 = float(np.nanmin(log.arrival)), float(np.nanmax(np.where(done, log.finish, log.arrival)))
    m.update(
        num_requests=float(len(isl)),
        first_arrival_s=t0,
        window_start_s=win.start_s,
        window_end_s=win.end_s,
        window_requests=float(win.requests),
        # of them still running when measured (a continued run's longest outputs: simulator.Run.result)
        window_unfinished=float(np.isnan(log.finish[inw]).sum()),
        last_arrival_s=win.last_arrival_s,
        stable=float(stab.stable),
        converged=float(stab.converged),
        duration_s=max(t1 - t0, 1e-12),  # whole run, first arrival to last finish
        num_gpus=float(pools.total),
        request_rate=m["offered_rps"],
        output_tokens=float(osl[done].sum()),  # whole run, finished requests
        input_tokens=float((isl - template).sum()),
        mean_in_system=_mean_in_system(log, win),
        # prompt tokens served from prefix caches (the trace's block hashes, else the flat rate)
        prefix_hit_rate=float(cached.sum()) / max(float(isl.sum()), 1.0),
    )
    for pool, g in stab.growth.items():
        m[f"{pool}_queue_growth"] = g
    return SimResult(m, utilisation, log.first_token - log.arrival,
                     np.where(osl > 1, (log.finish - log.first_token) / np.maximum(osl - 1, 1), np.nan),
                     log.finish - log.arrival, steps, win, stab)


def not_known(m: dict) -> dict[str, str]:
    """Figures of a summary that its run could not measure, each with the reason (a person reads them
    as "not known", never as a number): requests/s completed in the window counts the finishes of
    requests that arrived about one E2E earlier; when the window starts less than the median E2E after
    the first arrival, those requests mostly never came (the run had not started), and the count reads
    low (a 200-request run: 0.00 completed beside 172 req/s of goodput). A warm-started run (sim/warm.py)
    seats the decode pool's steady population at t = 0, so its completions flow from the start."""
    out: dict[str, str] = {}
    if m.get("warm_sequences", 0.0) > 0:
        return out
    since = m.get("window_start_s", 0.0) - m.get("first_arrival_s", 0.0)
    e2e = m.get("e2e_p50_s", float("nan"))
    if not since >= e2e:  # NaN and +inf (most requests still running) included
        typical = f"E2E p50 {e2e:.1f} s" if e2e < float("inf") else "most still running when the run stopped"
        out["served_rps"] = (f"the window starts {since:.1f} s after the first arrival, sooner than a request takes to "
                             f"finish ({typical}), so the completions it holds under-count; run longer (more "
                             "--requests, or none to let the simulator choose)")
    return out
