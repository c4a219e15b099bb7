"""Sweeps: a grid of plans or simulations from a YAML file, one row per cell.

A grid names its axes; every combination is one cell, in the order the axes are written:
- `kind: simulate`: plans x workloads x rates x what-if changes; each cell simulates the plan (the
  what-if keys of sim/search/whatif.py applied) at steady state, or for exactly `requests` requests.
- `kind: plan`: models x hardware x gpus x workloads x rates x SLOs x what-if changes; each cell
  runs the planner (sim/search/planner.py, one process) at `objective`.
A cell is a pure function of the grid's fields and its own (seeded): the same grid gives the same
rows on one worker or many, on a process pool or on Ray, in any completion order. Each finished
cell is appended to the folder's cells.jsonl under a key that hashes what it ran, so an interrupted
sweep run again keeps its finished cells (sim/commands/sweep.py writes the table and the chart).

Example grid (configs-style YAML):
    kind: simulate
    plans: [tiny-cpu]
    rates: [2.0, 4.0, 8.0]
    requests: 50
    whatif: {cpu.overhead_scale: [0.5, 1.0], hardware.nvlink_gbps: [900, 1800]}
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rackplan.specs import (
    SLO,
    Scenario,
    SpecError,
    load_hardware,
    load_model,
    load_plan,
    load_workload,
    resolve_profile,
    spec_ref,
)
from rackplan.specs.fields import from_dict, read_yaml

MAX_CELLS = 100_000  # cells of one grid at most (each row is kept in memory, and each cell costs a run)
# the table's columns: the cell's axes, then what it measured (metrics: the simulator's steady state, or for
# a plan cell the verified winner's; `source` says which)
AXES = ("cell", "kind", "plan", "model", "hardware", "gpus", "workload", "rate", "ttft_slo_s", "tpot_slo_s",
        "change")
RESULTS = ("status", "source", "summary", "gpus_used", "stable", "saturated", "request_rate", "output_tps_per_gpu",
           "tps_per_user", "ttft_p90_s", "tpot_p90_s", "num_requests", "error")
COLUMNS = AXES + RESULTS


@dataclass(frozen=True)
class Grid:
    """A sweep's axes and the settings every cell shares (loaded from YAML: sweep.load_grid)."""

    kind: Literal["simulate", "plan"] = "simulate"
    plans: tuple[str, ...] = ()  # simulate: plan names or paths
    models: tuple[str, ...] = ()  # plan: model, hardware and GPU budget axes
    hardware: tuple[str, ...] = ()
    gpus: tuple[int, ...] = ()
    workloads: tuple[str, ...] = ()  # () : the plan's workload (simulate) or isl4k-osl1k (plan)
    rates: tuple[float, ...] = ()  # Poisson req/s (simulate: the load; plan: --rate of min-gpus / latency)
    slos: tuple[SLO, ...] = (SLO(),)  # plan cells
    objective: Literal["throughput", "min-gpus", "latency"] = "throughput"
    whatif: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # key -> values (sim/search/whatif.py)
    requests: int | None = None  # simulate: exactly this many requests per cell (None: steady state)
    seed: int | None = None  # simulator seed (None: each workload's)

    def __post_init__(self):
        need = ("plans",) if self.kind == "simulate" else ("models", "hardware", "gpus")
        for name in need:
            if not getattr(self, name):
                raise SpecError("", name, f"a non-empty list (a {self.kind} grid needs it)")
        unused = ("models", "hardware", "gpus") if self.kind == "simulate" else ("plans", "requests")
        for name in unused:
            if getattr(self, name):
                raise SpecError("", name, f"nothing in a {self.kind} grid (it is a "
                                f"{'plan' if self.kind == 'simulate' else 'simulate'} grid's axis)")
        for name in ("gpus", "rates"):
            if any(v <= 0 for v in getattr(self, name)):
                raise SpecError("", name, "positive values", getattr(self, name))
        if self.kind == "plan" and self.rates and self.objective == "throughput":
            raise SpecError("", "rates", "no rates for objective throughput (it plans each deployment at its "
                            "capacity); objective min-gpus or latency serve a given rate")
        if self.requests is not None and self.requests < 1:
            raise SpecError("", "requests", "a positive integer", self.requests)
        if any(not values for values in self.whatif.values()):
            raise SpecError("", "whatif", "at least one value per key", self.whatif)


@dataclass(frozen=True)
class Cell:
    """One point of the grid: `index` in grid order and the axes' values (None: the default)."""

    index: int
    plan: str | None
    model: str | None
    hardware: str | None
    gpus: int | None
    workload: str | None
    rate: float | None
    slo: SLO | None
    change: tuple[tuple[str, Any], ...]

    def key(self, grid: Grid) -> str:
        """A hash of everything the cell runs (its axes and the grid's shared settings): a finished
        cell of an earlier run of the same grid is kept only under the same key."""
        doc = {k: v for k, v in asdict(self).items() if k != "index"}
        doc.update(kind=grid.kind, objective=grid.objective, requests=grid.requests, seed=grid.seed)
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def axes(self, grid: Grid) -> dict:
        from .search.whatif import label

        slo = self.slo
        return {"cell": self.index, "kind": grid.kind, "plan": self.plan or "", "model": self.model or "",
                "hardware": self.hardware or "", "gpus": self.gpus or "", "workload": self.workload or "",
                "rate": self.rate if self.rate is not None else "",
                "ttft_slo_s": slo.ttft_p90_s if slo else "", "tpot_slo_s": slo.tpot_p90_s if slo else "",
                "change": label(self.change)}


def load_grid(path: str) -> Grid:
    """The grid of a YAML file (one-line SpecError naming the field on bad input)."""
    data = read_yaml(path)
    return from_dict(Grid, data, where=str(path))


def cells(grid: Grid) -> list[Cell]:
    """Every cell, in grid order (the axes as written, the last varying fastest); at most MAX_CELLS."""
    from .search.whatif import combinations

    combos = combinations(list(grid.whatif.items())) or [()]
    workloads = grid.workloads or (None,)
    rates = grid.rates or (None,)
    if grid.kind == "simulate":
        axes = itertools.product(grid.plans, [None], [None], [None], workloads, rates, [None], combos)
    else:
        axes = itertools.product([None], grid.models, grid.hardware, grid.gpus, workloads, rates, grid.slos, combos)
    count = _count(grid, len(combos))
    if count > MAX_CELLS:
        raise SpecError("", "grid", f"at most {MAX_CELLS:,} cells (the axes multiply to {count:,})")
    return [Cell(i, *values) for i, values in enumerate(axes)]


def _count(grid: Grid, combos: int) -> int:
    n = max(1, len(grid.workloads)) * max(1, len(grid.rates)) * combos
    return n * len(grid.plans) if grid.kind == "simulate" else \
        n * len(grid.models) * len(grid.hardware) * len(grid.gpus) * len(grid.slos)


@functools.lru_cache(maxsize=64)
def _load(kind: str, name: str):
    return {"plan": load_plan, "model": load_model, "hardware": load_hardware, "workload": load_workload}[kind](name)


def specs_of(grid: Grid, cell: Cell):
    """(plan or None, Scenario with the cell's changes): SpecError on an unknown name or key."""
    from .search import whatif
    from .search.verify import at_rate

    plan = _load("plan", cell.plan) if cell.plan else None
    model = _load("model", plan.model if plan else cell.model)
    hw = _load("hardware", plan.hardware if plan else cell.hardware)
    wl = _load("workload", cell.workload or (plan.workload if plan else None) or "isl4k-osl1k")
    if cell.rate is not None and grid.kind == "simulate":
        if wl.arrival.kind != "poisson":
            raise SpecError("", "rates", f"a workload with Poisson arrivals ({wl.name} is closed-loop)")
        wl = at_rate(wl, cell.rate)
    elif plan is not None and cell.workload is None and "request_rate" in plan.predicted:
        wl = at_rate(wl, plan.predicted["request_rate"])  # the load the planner verified, as `simulate` does
    profile = resolve_profile(None, plan.profile if plan else None, hw)
    return plan, whatif.changed_specs(Scenario(plan, model, hw, wl, profile), cell.change)


def check(grid: Grid, todo: list[Cell]) -> None:
    """Every cell's names and what-if keys resolve (before any cell runs: bad input is refused whole)."""
    seen = set()
    for cell in todo:
        sig = (cell.plan, cell.model, cell.hardware, cell.workload, cell.rate is None, cell.change)
        if sig not in seen:
            seen.add(sig)
            specs_of(grid, cell)


def run_cell(grid: Grid, cell: Cell) -> dict:
    """The row of one cell (its axes and results); a plan with no feasible layout is a row, not an error."""
    plan, specs = specs_of(grid, cell)
    row = dict.fromkeys(COLUMNS, "") | cell.axes(grid)
    row.update(_simulate(grid, plan, specs) if grid.kind == "simulate" else _plan(grid, cell, specs))
    return row


def _simulate(grid: Grid, plan, specs) -> dict:
    from .search.verify import run_simulation
    from .simulator import PRECISION

    plan = specs.plan or plan
    res = run_simulation(Scenario(plan, specs.model, specs.hw, specs.workload, specs.profile), grid.requests, grid.seed,
                         precision=None if grid.requests else PRECISION)
    m = res.metrics
    source = f"simulator, {grid.requests} requests" if grid.requests else "simulator, steady state"
    return _measured(m, res.stable, ",".join(res.stability.saturated)) | {
        "status": "ok", "source": source, "summary": plan.summary, "gpus_used": plan.gpus_used}


def _measured(m: dict, stable: bool, saturated: str) -> dict:
    keep = ("request_rate", "output_tps_per_gpu", "tps_per_user", "ttft_p90_s", "tpot_p90_s")
    out = {k: float(m[k]) for k in keep if k in m and (stable or k not in ("ttft_p90_s", "tpot_p90_s"))}
    return out | {"stable": int(stable), "saturated": saturated, "num_requests": int(m.get("num_requests", 0))}


def _plan(grid: Grid, cell: Cell, specs) -> dict:
    from .search import planner

    req = planner.Request(specs.model, specs.hw, specs.profile, specs.workload, cell.gpus, cell.slo or SLO(),
                          spec_ref("models", cell.model), spec_ref("hardware", cell.hardware),
                          spec_ref("workloads", cell.workload or "isl4k-osl1k"),
                          spec_ref("profiles", specs.hw.default_profile), objective=grid.objective,
                          target_rps=cell.rate, workers=1, seed=grid.seed)
    try:
        res = planner.plan(req, name=f"cell{cell.index}")
    except planner.NoFeasiblePlan as exc:
        return {"status": "no plan", "error": str(exc)}
    w = res.winner
    out = _measured(w.check.metrics, bool(w.check.stable), "") if w.check is not None else {}
    out.update(request_rate=w.rate_rps, output_tps_per_gpu=w.tps_gpu, tps_per_user=w.tps_user)
    source = "simulator, verified plan" if w.check is not None else "analytic estimate"
    return out | {"status": "ok", "source": source, "summary": res.plan.summary, "gpus_used": w.cand.gpus}



def groups(rows: list[dict]) -> dict[str, list[dict]]:
    """The rows that measured both tokens/s/GPU and tokens/s/user, by model / hardware (plan cells) or
    plan (simulate cells): the series of sweep.png and report.html."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        if isinstance(r.get("output_tps_per_gpu"), float) and isinstance(r.get("tps_per_user"), float):
            out.setdefault(r["plan"] or f"{r['model']} / {r['hardware']}", []).append(r)
    return out
