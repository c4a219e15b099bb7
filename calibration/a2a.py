"""All-to-all fits: published dispatch/combine tables -> A2AParams the simulator uses as they are.

Every prediction goes through `sim.cost.alltoall.a2a_seconds` with a DEP-n layout of the table's
model (DeepSeek-V3 shapes, the table's payload dtype) on the table's hardware, so fitted entries
price exactly what the tables measured. Groups are (kernel, link, phase); a group is fitted with
one EP-agnostic entry, and per-EP entries are added where that misses the tolerance.

The tables ran their benchmark's routing, not the model's: DeepEP's tests (tests/legacy/) pick
top-k of random scores over all experts, except the internode normal test, which limits each
token to min(nodes, 4) nodes of 8 GPUs (groups = nodes). Predictions use that routing
(`bench_model`). Bandwidth-only rows (DeepEP's normal kernels) become latencies through the way
those tests count bytes: intranode, every token copy a rank receives (its own included);
internode, one copy per node a token goes to (its own node included): "logical bandwidth".

`floor=True` also fits a latency floor, t = max(floor_s, alpha_s + bytes / (bw * bw_eff)): small
batches sit on a flat floor (TRT-LLM 2d: ~18 us up to 32 tokens) that a straight line cannot
follow. A2AParams has no floor field yet, so written profiles carry the linear fit and the floor
fit is reported beside it (see `A2AFit.floor_s`).
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rackplan.sim.cost.alltoall import a2a_seconds, bytes_per_token
from rackplan.sim.cost.moe import holder_hit_probability
from rackplan.specs import DTYPE_BYTES, A2AParams, HardwareSpec, Layout, ModelSpec, Profile, SpecError, load_model
from rackplan.specs.reading import number

from .io import read_table
from .robust import fit_relative

TOLERANCE = 0.10  # per-point relative error that triggers per-EP entries
BENCH_GPUS_PER_NODE = 8  # DeepEP's tests run 8 local ranks per node (H800 HGX)
BENCH_MAX_NODES = 4  # DeepEP internode test: num_topk_groups = min(num_nodes, 4)


@dataclass(frozen=True)
class A2APoint:
    """One published latency: `tokens` per rank through one phase at EP size `ep`."""

    kernel: str
    ep: int
    phase: str
    tokens: float
    seconds: float
    dtype: str


@dataclass
class A2AFit:
    """Fitted entries, the floors fitted beside them, and the relative error at every point."""

    entries: list[A2AParams]
    floor_s: dict[tuple, float] = field(default_factory=dict)  # (kernel, link, phase, ep) -> floor
    floor_entries: list[A2AParams] = field(default_factory=list)  # the entries paired with floors
    rows: list[dict] = field(default_factory=list)  # per point: ep, phase, tokens, measured, fitted

    def max_error(self, key: str = "err_linear") -> float:
        return max(abs(r[key]) for r in self.rows)


def read_points(path: str | Path, model: ModelSpec) -> list[A2APoint]:
    """Points of a table; a bandwidth-only row becomes a latency through DeepEP's logical-bandwidth
    convention: tokens x logical copies per token x bytes/token / bandwidth (`logical_copies`)."""
    pts = []
    for i, r in enumerate(read_table(path), 1):
        where = f"{path}:row {i}"
        for key in ("kernel", "ep", "phase", "tokens", "dtype"):
            if key not in r or r[key] == "":
                raise SpecError(where, key, "a value")
        for key, kind in (("kernel", "kernel"), ("phase", "phase")):
            allowed = typing.get_args(typing.get_type_hints(A2AParams)[kind])
            if r[key] not in allowed:
                raise SpecError(where, key, "one of " + ", ".join(allowed), r[key])
        r["ep"] = number(r["ep"], where, "ep", lo=1, integer=True)
        r["tokens"] = number(r["tokens"], where, "tokens", lo=0, lo_open=True)
        if r["dtype"] not in DTYPE_BYTES:
            raise SpecError(where, "dtype", "one of " + ", ".join(DTYPE_BYTES), r["dtype"])
        lat = r.get("latency_us")
        if lat not in (None, ""):
            sec = number(lat, where, "latency_us", lo=0, lo_open=True) * 1e-6
        else:
            bw = r.get("bandwidth_gbps")
            if bw in (None, ""):
                raise SpecError(where, "latency_us", "a latency or a bandwidth_gbps")
            bw = number(bw, where, "bandwidth_gbps", lo=0, lo_open=True)
            m = _with_dtype(model, r["dtype"])
            copies = logical_copies(model, int(r["ep"]))
            sec = r["tokens"] * copies * bytes_per_token(m, r["dtype"]) / (bw * 1e9)
        if not np.isfinite(sec) or sec <= 0:
            raise SpecError(where, "latency_us", "a finite positive latency", sec)
        pts.append(A2APoint(r["kernel"], int(r["ep"]), r["phase"], float(r["tokens"]), sec, r["dtype"]))
    return pts


def bench_model(model: ModelSpec, kernel: str, ep: int) -> ModelSpec:
    """`model` routed as DeepEP's tests route: top-k over all experts, except the internode normal
    kernels' test, whose groups are the nodes and which keeps min(nodes, 4) of them per token."""
    nodes = max(1, ep // BENCH_GPUS_PER_NODE)
    groups, keep = (nodes, min(nodes, BENCH_MAX_NODES)) if kernel == "high_throughput" and nodes > 1 else (1, 1)
    moe = dataclasses.replace(model.moe, num_groups=groups, topk_groups=keep)
    return dataclasses.replace(model, moe=moe)


def logical_copies(model: ModelSpec, ep: int) -> float:
    """Token copies per token DeepEP's normal-kernel tests divide by the time: intranode, the copies
    a rank receives (recv_x, its own included: ep x p_rank); internode, the nodes a token is sent to
    (num_rdma_token_sent, its own node included: nodes x p_node)."""
    nodes = max(1, ep // BENCH_GPUS_PER_NODE)
    m = bench_model(model, "high_throughput", ep)
    if nodes == 1:
        return ep * holder_hit_probability(m, 1.0 / ep)
    return nodes * holder_hit_probability(m, 1.0 / nodes)


def _with_dtype(model: ModelSpec, dtype: str) -> ModelSpec:
    dt = dataclasses.replace(model.dtypes, dispatch=dtype, combine=dtype)
    return dataclasses.replace(model, dtypes=dt)


def predict(points: list[A2APoint], entries: list[A2AParams], model: ModelSpec, hw: HardwareSpec,
            floors: dict | None = None) -> np.ndarray:
    """Seconds the cost model gives each point with these entries (and optional floors)."""
    prof = Profile(name="a2a-fit", a2a=tuple(entries))
    out = np.empty(len(points))
    for i, p in enumerate(points):
        lay = Layout(role="decode" if p.kernel == "low_latency" else "prefill", dp=p.ep)
        m = bench_model(_with_dtype(model, p.dtype), p.kernel, p.ep)
        t = a2a_seconds(m, lay, hw, prof, p.tokens, p.phase, p.kernel)
        if floors:
            t = max(t, floors.get(_link_key(p, hw), 0.0))
        out[i] = t
    return out


def _link(p: A2APoint, hw: HardwareSpec) -> str:
    """The link that carries a point's bottleneck: scale-out once the EP group leaves the domain."""
    return "nvlink" if p.ep <= hw.domain_size else "scaleout"


def _link_key(p: A2APoint, hw: HardwareSpec) -> tuple:
    return (p.kernel, _link(p, hw), p.phase, p.ep)


def fit_a2a(points: list[A2APoint], hw: HardwareSpec, model: ModelSpec | None = None,
            floor: bool = True, prior: Profile | None = None) -> A2AFit:
    """Fit A2AParams for every (kernel, link, phase) group in `points`.

    NVLink groups first (scale-out points also price their NVLink share), then scale-out. A group
    whose points all share one EP size and one batch gets alpha from the other link's fit of the
    same kernel and phase (or from `prior`) and fits bw_eff only.
    """
    model = model or load_model("deepseek-v3")
    prior = prior or Profile(name="prior")
    groups: dict[tuple, list[A2APoint]] = {}
    for p in points:
        groups.setdefault((p.kernel, _link(p, hw), p.phase), []).append(p)
    order = sorted(groups, key=lambda g: (not _identifiable(groups[g]), g[1] != "nvlink"))
    entries: list[A2AParams] = _prior_entries(groups, prior)
    for g in order:
        entries = _refit(g, groups[g], entries, model, hw)
    for g in order:  # refit scale-out once the NVLink entries it prices beside are fitted
        if g[1] == "scaleout":
            entries = _refit(g, groups[g], entries, model, hw)
    fit = A2AFit(entries)
    if floor:
        fit.floor_s, fit.floor_entries = _fit_floors(groups, entries, model, hw)
    lin = predict(points, entries, model, hw)
    flo = predict(points, with_floor_entries(entries, fit.floor_entries), model, hw, fit.floor_s)
    for p, a, b in zip(points, lin, flo):
        fit.rows.append({"kernel": p.kernel, "ep": p.ep, "phase": p.phase, "tokens": p.tokens,
                         "measured_s": p.seconds, "linear_s": float(a), "floor_s": float(b),
                         "err_linear": float(a / p.seconds - 1), "err_floor": float(b / p.seconds - 1)})
    return fit


def _identifiable(pts: list[A2APoint]) -> bool:
    """Alpha and bandwidth separate only over batch sizes at one EP size: across EP sizes the bytes
    change with the routing and the peers, which the per-EP physics already prices."""
    return any(len({p.tokens for p in pts if p.ep == ep}) >= 2 for ep in {p.ep for p in pts})


def _prior_entries(groups: dict, prior: Profile) -> list[A2AParams]:
    """Provisional entries (from the prior profile) so mixed-link predictions can run."""
    out = []
    for kernel, _link, phase in groups:
        for lk in ("nvlink", "scaleout"):
            try:
                base = prior.a2a_params(kernel, lk, 8, phase)
            except SpecError:  # the prior has no entry for this kernel and link
                base = A2AParams(kernel=kernel, link=lk, alpha_s=20e-6, bw_eff=0.8)
            out.append(dataclasses.replace(base, kernel=kernel, link=lk, phase=phase, ep=None))
    return list({(e.kernel, e.link, e.phase): e for e in out}.values())


def _refit(g: tuple, pts: list[A2APoint], entries: list[A2AParams], model, hw) -> list[A2AParams]:
    """`entries` with group g's entries replaced by a fit (seeded with the group's current alpha)."""
    own = [e for e in entries if (e.kernel, e.link, e.phase) == g and e.ep is None]
    others = [e for e in entries if (e.kernel, e.link, e.phase) != g]
    return others + _fit_group(g, pts, others, model, hw, own[0].alpha_s if own else None)


def _fit_group(g: tuple, pts: list[A2APoint], others: list[A2AParams], model, hw,
               alpha0: float | None = None) -> list[A2AParams]:
    kernel, link, phase = g
    y = np.array([p.seconds for p in pts])
    where = f"a2a {kernel}/{link}/{phase}"
    alpha0 = _borrowed_alpha(g, others) if alpha0 is None else alpha0

    def make(p, ep=None):
        return A2AParams(kernel=kernel, link=link, phase=phase, alpha_s=float(p[0]), bw_eff=float(p[1]), ep=ep)

    fitted = None
    if _identifiable(pts):
        (a, b), err = fit_relative(lambda p: predict(pts, others + [make(p)], model, hw),
                                   [alpha0, 0.7], [0.0, 0.01], [float(np.max(y)), 1.5], y, where, "points",
                                   minimax=True)
        # bw_eff pinned at its bound: the bytes do not explain the spread (one batch size, noisy EPs)
        fitted = (a, b, err) if b < 1.49 else None
    if fitted is None:
        (b,), err = fit_relative(lambda p: predict(pts, others + [make([alpha0, p[0]])], model, hw),
                                 [0.7], [0.01], [1.5], y, where, "points", minimax=True)
        fitted = (alpha0, b, err)
    a, b, err = fitted
    generic = make([a, b])
    out = [generic]
    if np.max(np.abs(err)) > TOLERANCE:
        out += _per_ep(pts, generic, others, make, model, hw, where)
    return out


def _borrowed_alpha(g: tuple, entries: list[A2AParams]) -> float:
    """Alpha of the same kernel and phase on the other link (the kernel's launch/sync floor)."""
    kernel, link, phase = g
    cands = [e for e in entries if e.kernel == kernel and e.phase in (phase, "both") and e.link != link]
    return cands[0].alpha_s if cands else 20e-6


def _per_ep(pts, generic, others, make, model, hw, where) -> list[A2AParams]:
    """One entry per EP size: both parameters where the EP has several batches, else bw_eff only."""
    out = []
    for ep in sorted({p.ep for p in pts}):
        sub = [p for p in pts if p.ep == ep]
        y = np.array([p.seconds for p in sub])
        if _identifiable(sub):
            (a, b), _ = fit_relative(lambda p, sub=sub, ep=ep: predict(sub, others + [make(p, ep)], model, hw),
                                     [generic.alpha_s, generic.bw_eff], [0.0, 0.01], [float(np.max(y)), 1.5],
                                     y, f"{where}/ep{ep}", "points", minimax=True)
        else:
            a = generic.alpha_s
            (b,), _ = fit_relative(lambda p, sub=sub, a=a, ep=ep: predict(sub, others + [make([a, p[0]], ep)],
                                                                             model, hw),
                                   [generic.bw_eff], [0.01], [1.5], y, f"{where}/ep{ep}", "points")
        out.append(make([a, b], ep))
    return out


def _fit_floors(groups: dict, entries: list[A2AParams], model, hw) -> tuple[dict, list[A2AParams]]:
    """Per (kernel, link, phase, ep) with several batch sizes: refit alpha and bw_eff with a floor.
    Returns the floors and the entries that pair with them (they replace the linear ones)."""
    floors, paired = {}, []
    for g, pts in groups.items():
        for ep in sorted({p.ep for p in pts}):
            sub = [p for p in pts if p.ep == ep]
            if len({p.tokens for p in sub}) < 4:
                continue  # a floor needs the flat part and the slope: several batch sizes
            key = (g[0], g[1], g[2], ep)
            floors[key], entry = _floor_fit(sub, g, ep, entries, model, hw, key)
            paired.append(entry)
    return floors, paired


def with_floor_entries(entries: list[A2AParams], paired: list[A2AParams]) -> list[A2AParams]:
    """Linear entries with the floor-paired ones swapped in (same kernel, link, phase, EP)."""
    keys = {(e.kernel, e.link, e.phase, e.ep) for e in paired}
    return [e for e in entries if (e.kernel, e.link, e.phase, e.ep) not in keys] + paired


def _floor_fit(sub, g, ep, entries, model, hw, key) -> tuple[float, A2AParams]:
    y = np.array([p.seconds for p in sub])
    others = [e for e in entries if not ((e.kernel, e.link, e.phase) == g and e.ep in (ep, None))]

    def make(p):
        return A2AParams(kernel=g[0], link=g[1], phase=g[2], alpha_s=float(p[1]), bw_eff=float(p[2]), ep=ep)

    def pred(p):
        return predict(sub, others + [make(p)], model, hw, {key: float(p[0])})

    p, _ = fit_relative(pred, [float(np.min(y)), 0.5 * float(np.min(y)), 0.7], [0.0, 0.0, 0.01],
                        [float(np.max(y)), float(np.max(y)), 1.5], y, f"a2a floor {key}", "points",
                        minimax=True)
    return float(p[0]), make(p)
