"""Request classes in a run: which class each request belongs to, its lengths, and each class's
attainment of its targets (rackplan/specs/slo.py).

A request's class is a function of the workload's seed and the request's index alone (a SplitMix64
hash of the two, against the classes' cumulative shares), so the class of request i is the same
however the requests are drawn (at once, or chunk by chunk in a continued run) and the summary can
name it from the index. A class with its own lengths redraws those of its requests from the chunk's
generator after the workload's own draws (a workload without classes draws exactly as before).

Summary keys, per class `c`: `class.c.requests`, `class.c.attainment` (share of its window requests
within every limit), `class.c.goodput_rps`, and per target `class.c.<key>` (the class's percentile)
with `class.c.<key>_limit`. With classes, `goodput_rps` and `slo_attainment` count each request
against its own class's limits.
"""
from __future__ import annotations

import numpy as np

from rackplan.specs import SLO, Workload, sample_lengths
from rackplan.specs.slo import RequestClass, Target

from .metrics import _percentiles

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64 constants (Steele, Lea, Flood 2014)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _uniform(seed: int, index: np.ndarray) -> np.ndarray:
    """[n] uniforms in [0, 1) from a SplitMix64 hash of (seed, index)."""
    with np.errstate(over="ignore"):
        z = np.asarray(index, dtype=np.uint64) + np.uint64(seed) * _M2 + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def class_index(wl: Workload, first: int, n: int) -> np.ndarray:
    """[n] class of requests first .. first + n - 1 (indices into wl.classes)."""
    edges = np.cumsum([c.share for c in wl.classes])
    return np.minimum(np.searchsorted(edges, _uniform(wl.seed, np.arange(first, first + n)), side="right"),
                      len(wl.classes) - 1)


def mean_lengths(wl: Workload) -> tuple[float, float]:
    """Mean prompt and output tokens over the classes' shares (each class's own lengths, else the
    workload's); ValueError for trace lengths (LengthDist.expected)."""
    if not wl.classes:
        return wl.isl.expected, wl.osl.expected
    return (sum(c.share * (c.isl or wl.isl).expected for c in wl.classes),
            sum(c.share * (c.osl or wl.osl).expected for c in wl.classes))


def with_class_lengths(wl: Workload, isl: np.ndarray, osl: np.ndarray, first: int,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The lengths with each class's own distributions drawn for its requests ([n] each)."""
    klass = class_index(wl, first, len(isl))
    isl, osl = isl.copy(), osl.copy()
    for i, c in enumerate(wl.classes):
        mine = klass == i
        for dist, out in ((c.isl, isl), (c.osl, osl)):
            if dist is not None and mine.any():
                out[mine] = sample_lengths(dist, int(mine.sum()), rng)
    return isl, osl


def class_priority(wl: Workload, first: int, n: int) -> np.ndarray | None:
    """[n] each request's class priority (None when every class has the default 0: FIFO as before)."""
    prio = np.array([c.priority for c in wl.classes], dtype=np.int64)
    return prio[class_index(wl, first, n)] if prio.any() else None


def _request_figure(t: Target, ttft, tpot, e2e) -> np.ndarray:
    """A request's own figure for a target's metric (ITL: its mean inter-token time, its TPOT)."""
    return {"ttft": ttft, "tpot": tpot, "itl": tpot, "e2e": e2e}[t.metric]


def _good(c: RequestClass, osl, ttft, tpot, e2e) -> np.ndarray:
    """[n] whether each request is within every limit of its class (a one-token output has no TPOT)."""
    ok = np.ones(len(osl), dtype=bool)
    for t in c.targets:
        fig = _request_figure(t, ttft, tpot, e2e)
        ok &= (fig <= t.limit_s) | (np.isnan(fig) & (osl <= 1))
    return ok


def class_metrics(wl: Workload, osl: np.ndarray, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray,
                  inw: np.ndarray, window_s: float, run_metrics: dict,
                  tpot_running: np.ndarray | None = None) -> dict[str, float]:
    """Per-class figures over the window's requests ([n] arrays in request-index order, `inw` the
    window's) and the goodput over the classes; ITL targets read the run's ITL percentiles.
    `tpot_running`: [n] TPOT so far of requests still decoding when the run stopped (NaN elsewhere):
    they are judged on it, their E2E projected as TTFT + (osl - 1) x that TPOT (a run measured while
    its longest outputs still run, sim/simulator.Run.result)."""
    if tpot_running is not None:
        going = np.isnan(e2e) & np.isfinite(tpot_running)
        tpot = np.where(going, tpot_running, tpot)
        e2e = np.where(going, ttft + np.maximum(osl - 1, 0) * tpot_running, e2e)
    klass = class_index(wl, 0, len(osl))
    out: dict[str, float] = {}
    good = np.zeros(len(osl), dtype=bool)
    for i, c in enumerate(wl.classes):
        mine = (klass == i) & inw
        ok = _good(c, osl[mine], ttft[mine], tpot[mine], e2e[mine])
        good[mine] = ok
        pre = f"class.{c.name}."
        out[pre + "requests"] = float(mine.sum())
        out[pre + "attainment"] = float(ok.mean()) if mine.any() else float("nan")
        out[pre + "goodput_rps"] = float(ok.sum()) / window_s
        for t in c.targets:
            if t.metric == "itl":
                value = run_metrics.get(t.key, float("nan"))
            else:  # unknown (no first token yet; still running with no pace): longer than any known
                fig = _request_figure(t, ttft, tpot, e2e)[mine]
                fig = np.where(np.isnan(fig) & ((osl[mine] > 1) | (t.metric != "tpot")), np.inf, fig)
                pcts: dict[str, float] = {}
                _percentiles(pcts, t.metric, fig)
                value = pcts[t.key]
            out[pre + t.key], out[pre + t.key + "_limit"] = value, t.limit_s
    out["goodput_rps"] = float(good.sum()) / window_s
    out["slo_attainment"] = float(good[inw].mean()) if inw.any() else float("nan")
    return out


def search_slo(slo: SLO, wl: Workload) -> SLO:
    """The plan-wide p90 SLO the analytic search prices against: the given one, tightened to the
    strictest TTFT and TPOT / ITL limit of any class (the simulator then checks every class's own)."""
    targets = [t for c in wl.classes for t in c.targets]
    ttft = min([slo.ttft_p90_s] + [t.limit_s for t in targets if t.metric == "ttft"])
    tpot = min([slo.tpot_p90_s] + [t.limit_s for t in targets if t.metric in ("tpot", "itl")])
    return SLO(ttft, tpot)


def class_misses(metrics: dict) -> dict[str, float]:
    """Seconds by which each class's percentile exceeds its limit (only the ones that miss)."""
    out = {}
    for key, limit in metrics.items():
        if key.startswith("class.") and key.endswith("_limit"):
            value = metrics.get(key[:-len("_limit")], float("inf"))
            if not value <= limit:
                out[key[:-len("_limit")]] = value - limit
    return out


def class_lines(metrics: dict) -> list[str]:
    """One line per class: its attainment, goodput and each target against its limit (simulated)."""
    names = sorted({k.split(".")[1] for k in metrics if k.startswith("class.") and k.endswith(".requests")})
    lines = []
    for name in names:
        pre = f"class.{name}."
        parts = [f"{metrics[k]:.3g} s / {metrics[k + '_limit']:g} s {k[len(pre):-2].replace('_', ' ')}"
                 + ("" if metrics[k] <= metrics[k + "_limit"] else " MISSED")
                 for k in sorted(metrics) if k.startswith(pre) and k + "_limit" in metrics]
        lines.append(f"class {name}: {metrics[pre + 'attainment']:.1%} of {int(metrics[pre + 'requests'])} requests "
                     f"within their limits, goodput {metrics[pre + 'goodput_rps']:.2f} req/s; " + ", ".join(parts))
    return lines
