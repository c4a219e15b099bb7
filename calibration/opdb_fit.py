"""Fit a profile's efficiency curves from op-database rows: one Curve per op class, fitted on part of
the rows through the cost model's own functions and scored (MAPE) on the rows held out.

Every op class comes as `ClassRows`: measured seconds and a `predict(profile, rows)` that prices
those rows through sim/cost (roofline.price, efficiency.*, attention.py, moe.py, collective.py,
elementwise.py) under a profile carrying a trial curve, so a fitted curve prices exactly what the
table measured, and calibration.robust.fit_relative (the fit every rackplan measurement goes
through) finds the curve. Rows are split by a seeded draw: HOLDOUT of them never touch the fit.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rackplan.sim.cost.efficiency import in_ranges
from rackplan.specs import Curve, Profile

from .opdb import Table
from .robust import fit_relative, mape

HOLDOUT = 0.25  # fraction of each class's rows held out of the fit
SEED = 0
BOUNDS = {"eff_max": (1e-4, 1.0), "x_half": (0.0, 1e7), "y_half": (0.0, 1e15), "z_half": (0.0, 1e7),
          "work_half": (0.0, 1e18), "sharpness": (1.0, 8.0), "tiles_half": (0.0, 1e4),
          "pad_cost": (0.0, 10.0), "row_half": (0.0, 1e9), "chunk_half": (0.0, 1e9)}
# what a range with fewer fit rows than its free fields fits without (_fit_ranges): its padded rows priced as real
# ones and no per-row cost (Curve pad_cost, row_half, chunk_half; z_chunk goes with chunk_half)
SPARSE_OFF = {"pad_cost": 0.0, "row_half": 0.0, "chunk_half": 0.0, "z_chunk": 0.0}
# held-out MAPE (%) each class must reach (issue 13): GEMMs and attention 10, MoE and communication 15
TARGETS = {"gemm": 10.0, "attn": 10.0, "experts": 15.0, "allreduce": 15.0, "a2a": 15.0, "quantize": 15.0,
           "mhc": 15.0}


@dataclass
class ClassRows:
    """The rows of one op class and how the cost model prices them."""

    key: str  # curve key ("gemm.fp8")
    table: Table
    seconds: np.ndarray  # measured [N]
    predict: Callable[[Profile, np.ndarray], np.ndarray]  # (profile, row indices) -> seconds
    start: Curve | None  # initial curve, its fields not in `free` fixed (None: the class fits scalars only)
    free: tuple[str, ...]
    selection: str  # which rows, in words
    kernel: str = ""  # kernel_source used, where the table has several
    # curves fitted jointly with `key` (a second op inside the same measured kernel), as
    # (key, start, free); and Profile scalar fields fitted with it, as (field, start, low, high)
    also: tuple[tuple[str, Curve, tuple[str, ...]], ...] = ()
    scalars: tuple[tuple[str, float, float, float], ...] = ()
    configs: int = 1  # curves of `key` (kernel configurations; the class runs at the best of them)
    # or one curve of `key` per regime [work_min, work_max) of its work (kernels the engine dispatches by
    # size, a working set in or out of L2), each fitted on the rows in its range
    regimes: tuple[tuple[float, float], ...] = ()
    # what a range (or regime) with fewer fit rows than `free` fits, from the range before it: the first of these
    # fields, as many as it has fit rows (an all-reduce regime of two rows: eff_max and work_half, its bandwidth
    # and latency, the alpha-beta pair, the others the regime below's)
    sparse_free: tuple[str, ...] = ("eff_max",)
    bounds: dict = field(default_factory=dict)  # per-parameter (low, high) replacing BOUNDS for this class
    notes: dict = field(default_factory=dict)  # recorded with the fit (e.g. the table's own roughness)
    # kernel configurations dispatched by the shape measures x, y and z instead (`configs` unused): one curve
    # per (x_min, x_max, x_tile[, y_min, y_max[, z_min, z_max]]), each fitted on the rows whose x (`x`, [N]),
    # y (`y`, [N]; None: no y range) and z (`z`, [N]; None: no z range) fall in its ranges
    ranges: tuple[tuple[float, ...], ...] = ()
    # [N] the work of each row that `regimes` select by ([work_min, work_max): bytes reduced or moved); needed
    # with regimes, so each regime's curve is fitted on its own rows (_fit_ranges)
    work: np.ndarray | None = None
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    z: np.ndarray | None = None
    # [N] rows a measurement-quality screen took out (the table's own consistency, opdb_ops.screen): kept out
    # of the fit and of the held-out score after the seeded split over every row (None: none)
    screened: np.ndarray | None = None
    # fields of `free` that start at 0 and are kept only where they help: the fit also starts from the
    # best fit without them (so adding the term never ends in a worse fit-set minimum)
    optional: tuple[str, ...] = ()
    # a kernel dispatched by its load (rows per local expert as its tile heuristic averages them, `load`,
    # [N]; Curve.load_min / load_max): the class's curves (`configs` of them, with `also` and `scalars`)
    # fitted on every row first, then, `also` and scalars held, the curves again per range (lo, hi] on
    # that range's fit rows; a range with fewer fit rows than its parameters joins the one below
    load_ranges: tuple[tuple[float, float], ...] = ()
    load: np.ndarray | None = None
    # or a kernel whose configuration a tile rule picks (Curve.tile_rule, sim/cost/deepgemm.py): `load` then holds
    # each row's configuration group and load range (g - 1, g] becomes the curves' rule_group g (never merged;
    # a group with too few fit rows for its curves keeps the all-rows fit)
    rule: str = ""
    # the kernel_source each of `ranges` stands for (a backend dispatch, opdb_ops.MLA_PREFILL_DISPATCH): the fit
    # also reports the held-out MAPE of each range's rows under its name
    range_kernels: tuple[str, ...] = ()

    def parts(self):
        """(curve key, config index, start, free fields) of every curve fitted."""
        if self.start is None:
            own = ()
        elif self.ranges:
            own = tuple((self.key, j, _ranged_start(self.start, r), self.free) for j, r in enumerate(self.ranges))
        elif self.regimes:
            own = tuple((self.key, j, dataclasses.replace(self.start, work_min=lo, work_max=_bound(hi)), self.free)
                        for j, (lo, hi) in enumerate(self.regimes))
        else:
            own = tuple((self.key, j, _config_start(self.start, j), self.free) for j in range(self.configs))
        return own + tuple((k, 0, c, f) for k, c, f in self.also)

    def in_range(self, j: int) -> np.ndarray:
        """[N] whether each row's x, y, z and work fall in range (or regime) j's curve (efficiency.in_ranges, the
        one range check)."""
        shape = self.seconds.shape
        x, y, z, work = (np.zeros(shape) if v is None else np.asarray(v, float)
                         for v in (self.x, self.y, self.z, self.work))
        return np.broadcast_to(in_ranges(self.parts()[j][2], x, work, y, z=z), shape)


def _ranged_start(c: Curve, r: tuple[float, ...]) -> Curve:
    """Start of the configuration of range r = (x_min, x_max, x_tile[, y_min, y_max[, z_min, z_max]])."""
    lo, hi, tile, *rest = r
    y_min, y_max, z_min, z_max = (tuple(rest) + (0.0,) * 4)[:4]
    return dataclasses.replace(c, x_min=lo, x_max=hi, x_tile=tile, y_min=y_min, y_max=y_max, z_min=z_min,
                               z_max=z_max)


def _bound(hi: float) -> float:
    """A regime's upper edge as a Curve holds it (0: none)."""
    return hi if math.isfinite(hi) else 0.0


def _config_start(c: Curve, j: int) -> Curve:
    """Start of kernel configuration j: the first as given; the next a decade smaller in x and lower
    at its peak (small-M tiles), so each configuration wins somewhere and the fit can move both."""
    return dataclasses.replace(c, x_half=c.x_half * 10.0 ** -j, eff_max=c.eff_max * 0.6 ** j) if j else c


@dataclass
class ClassFit:
    """A fitted curve (or a2a entries) with its error on fit and held-out rows."""

    key: str
    table: Table
    rows_fit: int
    rows_held: int
    mape_fit: float
    mape_held: float
    selection: str
    kernel: str = ""
    curve: tuple[Curve, ...] | None = None
    extra: dict = field(default_factory=dict)

    @property
    def target(self) -> float:
        return TARGETS.get(self.key.split(".")[0], 15.0)

    def record(self) -> dict:
        """Provenance entry for the profile."""
        t = self.table
        out = {"table": f"{t.op}/{t.name}", "version": t.version, "rows_fit": self.rows_fit,
               "rows_held_out": self.rows_held, "mape_fit_pct": round(self.mape_fit, 2),
               "mape_held_out_pct": round(self.mape_held, 2), "rows": self.selection}
        if t.reused_from:
            out["reused_from"] = t.reused_from
        if self.kernel:
            out["kernel"] = self.kernel
        return {**out, **self.extra}


def split(n: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """(fit rows, held-out rows): a seeded draw keeps HOLDOUT of the rows out of the fit."""
    held = np.random.default_rng(seed).random(n) < HOLDOUT
    return np.flatnonzero(~held), np.flatnonzero(held)


LINEAR = ("eff_max", "sharpness", "mem_eff")  # fitted as they are; every other parameter in log10
STARTS = (0.0, -1.0, 1.0)  # decades the log parameters' starting values are shifted by (multi-start)


def fit_class(rows: ClassRows, prof: Profile, seed: int = SEED) -> tuple[ClassFit, Profile]:
    """Fit rows.key's curve (and its joint curves and scalars) on the fit rows, with `prof`
    supplying everything else; returns the fit and `prof` with the fitted values. Scale-like
    parameters are fitted in log10 from a few starting points and the best fit-set MAPE wins; a
    class with several kernel configurations adds them one at a time, each starting from the fit
    with one fewer (so a configuration can only help)."""
    fit_idx, held_idx = split(len(rows.seconds), seed)
    held_all = held_idx
    if rows.screened is not None:
        fit_idx, held_idx = fit_idx[~rows.screened[fit_idx]], held_idx[~rows.screened[held_idx]]
    warm = []
    if rows.ranges or rows.regimes:
        fitted, err_fit = _fit_ranges(rows, prof, fit_idx)
    elif rows.load_ranges:
        fitted, err_fit, used = _fit_loads(rows, prof, fit_idx, seed)
    else:
        if rows.configs > 1:
            _, fewer = fit_class(dataclasses.replace(rows, configs=rows.configs - 1), prof, seed)
            warm = [_vector(rows, fewer)]
        if rows.optional:
            without = dataclasses.replace(rows, optional=(), free=tuple(f for f in rows.free if f not in rows.optional),
                                          start=dataclasses.replace(rows.start, **dict.fromkeys(rows.optional, 0.0)))
            warm.append(_vector(rows, fit_class(without, prof, seed)[1]))
        fitted, err_fit = _fit(rows, prof, fit_idx, warm)
    held = mape(rows.predict(fitted, held_idx), rows.seconds[held_idx]) if len(held_idx) else float("nan")
    extra = dict(rows.notes)
    if rows.screened is not None:
        extra["rows_screened"] = int(rows.screened.sum())
        extra["mape_held_out_unscreened_pct"] = round(mape(rows.predict(fitted, held_all), rows.seconds[held_all]), 2)
    if rows.also:
        extra["fitted_with"] = [k for k, _, _ in rows.also]
    if rows.ranges:
        extra["configs"] = len(rows.ranges)
        extra["dispatch_by_context" if rows.range_kernels else "dispatch_by_rows"] = [
            [r[0], r[1] or "inf", r[2]] for r in rows.ranges]
        if any(len(r) > 3 and (r[3] or r[4]) for r in rows.ranges):  # and by y (n): (y_min, y_max]
            extra["dispatch_by_n"] = [[r[3], r[4] or "inf"] if len(r) > 3 else [0.0, "inf"] for r in rows.ranges]
        if any(len(r) > 5 and (r[5] or r[6]) for r in rows.ranges):  # and by z (k): [z_min, z_max)
            extra["dispatch_by_k"] = " ".join(f"[{r[5]:g}, {r[6] or math.inf:g})" if len(r) > 5 else "[0, inf)"
                                              for r in rows.ranges)
        if rows.range_kernels:
            extra["mape_held_out_by_kernel_pct"] = {
                k: round(mape(rows.predict(fitted, idx), rows.seconds[idx]), 2) if len(idx) else None
                for j, k in enumerate(rows.range_kernels) for idx in [held_idx[rows.in_range(j)[held_idx]]]}
            extra["rows_by_kernel"] = {k: int(rows.in_range(j).sum()) for j, k in enumerate(rows.range_kernels)}
    elif rows.configs > 1:
        extra["configs"] = rows.configs
    if rows.load_ranges and rows.rule:
        extra["dispatch_by_rule_group"] = {"tile_rule": rows.rule, "groups": [int(hi) for _, hi in used]}
    elif rows.load_ranges:
        extra["dispatch_by_load"] = [[lo, hi if math.isfinite(hi) else "inf"] for lo, hi in used]
    if rows.scalars:
        extra["scalars"] = {f: getattr(fitted, f) for f, *_ in rows.scalars}
    fit = ClassFit(rows.key, rows.table, len(fit_idx), len(held_idx), err_fit, held, rows.selection,
                   rows.kernel, curve=fitted.curves.get(rows.key), extra=extra)
    return fit, fitted


def _fit_ranges(rows: ClassRows, prof: Profile, fit_idx) -> tuple[Profile, float]:
    """Configurations dispatched by x (y, z), or regimes of work: each range's curve fitted alone on the fit
    rows in its range (no other curve prices them), then all of them written into `prof` (the class has no
    `also` or scalars here); the fit-set MAPE over all fit rows. A range with fewer fit rows than its
    parameters (a small table; an all-reduce regime of three message sizes) starts from the range before it (the
    first range: from the class's start) and fits the first of `sparse_free`, as many as it has fit rows (eff_max
    alone by default; nothing with no rows), and first drops the padded-row and per-row costs (SPARSE_OFF) where
    that leaves enough: a curve is never fitted on fewer rows than it has parameters, where the optimum is not
    unique and which one is found depends on the machine's arithmetic."""
    curves = []
    for j in range(len(rows.ranges or rows.regimes)):
        one = dataclasses.replace(rows, ranges=(rows.ranges[j],)) if rows.ranges else \
            dataclasses.replace(rows, regimes=(rows.regimes[j],))
        idx = fit_idx[rows.in_range(j)[fit_idx]]
        if len(idx) < len(one.free) and set(SPARSE_OFF) & set(one.free):  # too few rows for the padded-row and
            one = dataclasses.replace(one, free=tuple(f for f in one.free if f not in SPARSE_OFF),  # per-row costs
                                      start=dataclasses.replace(one.start, **SPARSE_OFF))  # too: priced without
        if len(idx) < len(one.free):
            own = one.parts()[0][2]
            bounds = {f: getattr(own, f) for f in ("x_min", "x_max", "x_tile", "y_min", "y_max", "z_min", "z_max",
                                                   "work_min", "work_max")}
            one = dataclasses.replace(one, start=dataclasses.replace(curves[-1] if curves else own, **bounds),
                                      regimes=(), free=rows.sparse_free[:len(idx)])
        fitted = _fit(one, prof, idx)[0] if one.free else \
            dataclasses.replace(prof, curves={**prof.curves, rows.key: (one.start,)})
        curves += fitted.curves[rows.key]
    out = dataclasses.replace(prof, curves={**prof.curves, rows.key: tuple(curves)})
    return out, mape(rows.predict(out, fit_idx), rows.seconds[fit_idx])


def _fit_loads(rows: ClassRows, prof: Profile, fit_idx, seed: int) -> tuple[Profile, float, list]:
    """A kernel dispatched by load (ClassRows.load_ranges): the class fitted on all its rows, then its
    curves refitted per load range on that range's fit rows (from the default starts and from the last
    fit), `also` and scalars held, then `also` and scalars refitted on every fit row with the ranges'
    curves held; twice. (profile, fit-set MAPE, ranges used)."""
    _, out = fit_class(dataclasses.replace(rows, load_ranges=()), prof, seed)
    held = dataclasses.replace(rows, also=(), scalars=(), load_ranges=())
    load = np.asarray(rows.load, float)
    used = _load_ranges(rows, load[fit_idx])
    ranged = [[_at_load(rows, c, lo, hi) for c in out.curves[rows.key]]
              for lo, hi in used]  # each range starts from the all-rows fit
    for _ in range(2):  # the ranges' curves with `also` held, then `also` with the ranges' curves held
        for j, (lo, hi) in enumerate(used):
            one = dataclasses.replace(held, start=_at_load(rows, rows.start, lo, hi))
            idx = fit_idx[(load[fit_idx] > lo) & (load[fit_idx] <= hi)] if rows.rule else \
                fit_idx[np.broadcast_to(in_ranges(one.start, 0.0, 0.0, load=load[fit_idx]), fit_idx.shape)]
            if rows.rule and len(idx) < rows.configs * len(rows.free):
                continue  # a rule's group with too few fit rows for its own curves keeps the all-rows fit
            warm = _vector(one, dataclasses.replace(out, curves={**out.curves, rows.key: tuple(ranged[j])}))
            ranged[j] = list(_fit(one, out, idx, [warm])[0].curves[rows.key])
        out = dataclasses.replace(out, curves={**out.curves, rows.key: tuple(c for cs in ranged for c in cs)})
        if rows.also or rows.scalars:
            out, _ = _fit(dataclasses.replace(rows, start=None, free=(), load_ranges=()), out, fit_idx, [
                _vector(dataclasses.replace(rows, start=None, free=(), load_ranges=()), out)])
    return out, mape(rows.predict(out, fit_idx), rows.seconds[fit_idx]), used


def _at_load(rows: ClassRows, c: Curve, lo: float, hi: float) -> Curve:
    """Curve c bounded to load range (lo, hi]: its load_min / load_max, or under a tile rule its rule_group hi."""
    if rows.rule:
        return dataclasses.replace(c, tile_rule=rows.rule, rule_group=int(hi))
    return dataclasses.replace(c, load_min=lo, load_max=_bound(hi))


def _load_ranges(rows: ClassRows, load_fit: np.ndarray) -> list[tuple[float, float]]:
    """rows.load_ranges with each range that holds fewer fit rows than its curves' parameters merged
    into the one below (the first into the one above); a tile rule's groups are never merged."""
    if rows.rule:
        return list(rows.load_ranges)
    need = rows.configs * len(rows.free)
    out: list[list[float]] = []
    for lo, hi in rows.load_ranges:
        n = int(np.sum((load_fit > lo) & (load_fit <= hi)))
        if out and (n < need or out[-1][2] < need):
            out[-1][1], out[-1][2] = hi, out[-1][2] + n
        else:
            out.append([lo, hi, n])
    return [(lo, hi) for lo, hi, _ in out]


def _specs(rows: ClassRows) -> list[tuple[str, float, float, float]]:
    """(name, start, low, high) of every fitted parameter, in the order _apply reads them."""
    own = [(f, getattr(start, f), *rows.bounds.get(f, BOUNDS[f])) for _, _, start, free in rows.parts() for f in free]
    return own + list(rows.scalars)


def _vector(rows: ClassRows, prof: Profile) -> np.ndarray:
    """Starting values for `rows` from a profile fitted with one configuration fewer: its curves, then
    the new configuration started from the last fitted one (as _config_start shifts it), then its scalars."""
    have = prof.curves.get(rows.key, ())
    out = []
    for key, j, start, free in rows.parts():
        src = have[j] if key == rows.key and j < len(have) else prof.curves.get(key, (start,))[0]
        if key == rows.key and j >= len(have):
            src = _config_start(have[-1], 1) if have else start
        out += [getattr(src, f) for f in free]
    return np.array(out + [getattr(prof, f) for f, *_ in rows.scalars], float)


def _fit(rows: ClassRows, prof: Profile, fit_idx, extra_starts=()) -> tuple[Profile, float]:
    """Best of the fits from the default starts (shifted by STARTS decades) and `extra_starts`."""
    specs = _specs(rows)
    logs = np.array([name not in LINEAR for name, *_ in specs])

    def to_values(z):
        return np.where(logs, 10.0 ** np.asarray(z, float), z)

    def zspace(v):
        return np.where(logs, np.log10(np.maximum(v, 1e-3)), v)

    lo = zspace(np.array([s[2] for s in specs], float))
    hi = zspace(np.array([s[3] for s in specs], float))
    z0 = zspace(np.array([s[1] for s in specs], float))
    points = [z0 + shift * logs for shift in STARTS] + [zspace(v) for v in extra_starts]
    best = None
    for z_start in points:
        z, _ = fit_relative(lambda z: rows.predict(_apply(rows, prof, to_values(z)), fit_idx),
                            np.clip(z_start, lo, hi), lo, hi, rows.seconds[fit_idx],
                            f"op database {rows.table.name}", rows.key)
        cand = _apply(rows, prof, [float(f"{v:.4g}") for v in to_values(z)], clip=True)
        err = mape(rows.predict(cand, fit_idx), rows.seconds[fit_idx])
        if best is None or err < best[1]:
            best = (cand, err)
    return best


def _apply(rows: ClassRows, prof: Profile, p, clip: bool = False) -> Profile:
    """`prof` with the parameter vector p written into rows' curves and scalar fields."""
    built: dict[str, list[Curve]] = {}
    i = 0
    for key, _, start, free in rows.parts():
        vals = {f: float(v) for f, v in zip(free, p[i:i + len(free)])}
        if clip:
            vals = {f: min(max(v, rows.bounds.get(f, BOUNDS[f])[0]), rows.bounds.get(f, BOUNDS[f])[1])
                    for f, v in vals.items()}
        built.setdefault(key, []).append(dataclasses.replace(start, **vals))
        i += len(free)
    scal = {f: min(max(float(v), low), high) if clip else float(v)
            for (f, _, low, high), v in zip(rows.scalars, p[i:])}
    return dataclasses.replace(prof, curves={**prof.curves, **{k: tuple(v) for k, v in built.items()}}, **scal)
