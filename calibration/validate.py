"""Predicted vs measured: per op, per step, and TTFT/TPOT of a serving run through the simulator.

Steps are split into the shapes the profile was fitted on and held-out ones (sizes the profile's
provenance does not list), so a profile's error bar is reported on data it never saw.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

import numpy as np

from rackplan.specs import Plan, Profile, load_hardware, load_model
from rackplan.specs.ops import DEVICE_OPS

from .fit import Fitter
from .robust import mape
from .samples import StepSample

# the serving keys' prefix of each replayed `vllm bench serve` file: vllm for the first, vllm1, vllm2, ... after
BENCH_TAG = re.compile(r"vllm\d*")


def bench_tag(i: int) -> str:
    """The serving-key prefix of the i-th --vllm-bench file (BENCH_TAG)."""
    return "vllm" if i == 0 else f"vllm{i}"


@dataclass
class Report:
    """Everything `validate` prints; `worst` is what --max-mape gates."""

    fit_sizes: dict[str, list[int]]
    held_sizes: dict[str, list[int]]
    ops: list[dict] = field(default_factory=list)  # op, set, n, predicted_s, measured_s, mape
    steps: list[dict] = field(default_factory=list)  # role, size, set, predicted_s, measured_s, err
    step_mape: dict[str, float] = field(default_factory=dict)  # set -> MAPE %
    serving: dict[str, float] = field(default_factory=dict)  # metric -> predicted, measured, err

    def gated(self) -> dict[str, float]:
        """MAPEs (%) checked against --max-mape: held-out ones when there are any."""
        s = "held-out" if self.held_sizes and any(self.held_sizes.values()) else "all"
        out = {f"op {r['op']}": r["mape"] for r in self.ops if r["set"] == s}
        if s in self.step_mape:
            out["step"] = self.step_mape[s]
        # colocated runs: the executor's lockstep engine priced by the cost model; separate
        # instances: the simulator itself (the plan as planned is what ran)
        reading = "lockstep" if "lockstep.ttft_p50_err" in self.serving else "simulator"
        benches = sorted({k.split(".", 1)[0] for k in self.serving if BENCH_TAG.fullmatch(k.split(".", 1)[0])})
        for key in (f"{tag}.{stat}" for tag in [reading] + benches for stat in ("ttft_p50", "tpot_p50")):
            if f"{key}_err" in self.serving:  # every bench (vllm, vllm1, ...), not only the first
                out[key] = abs(self.serving[f"{key}_err"]) * 100
        return out


def fit_sizes_of(prof: Profile) -> dict[str, set[int]]:
    return {k: set(v) for k, v in (prof.provenance.get("fit_sizes") or {}).items()}


def compare_steps(plan: Plan, samples: list[StepSample], prof: Profile) -> Report:
    """Per-op and per-step errors, on all sweep samples and on the held-out ones (serving-mode
    steps, one step each, are compared as their own set)."""
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    fitted = fit_sizes_of(prof)
    samples = [s.alone(hw) for s in samples]  # priced as a rank alone, like the fit (StepSample.alone)
    served = [s for s in samples if s.serve]
    samples = [s for s in samples if not s.serve]
    held = [s for s in samples if fitted and s.size not in fitted.get(s.role, set())]
    rep = Report({k: sorted(v) for k, v in fitted.items()},
                 {r: sorted({s.size for s in held if s.role == r}) for r in ("decode", "prefill")})
    fx = Fitter.__new__(Fitter)
    fx.plan, fx.model, fx.hw = plan, model, hw
    costs = {id(s): fx.price(prof, s) for s in samples + served}
    for name, sub in (("all", samples), ("held-out", held), ("serve", served)):
        if not sub:
            continue
        for op in DEVICE_OPS:
            pairs = [(costs[id(s)].breakdown().get(op, 0.0), s.ops[op]) for s in sub if s.ops.get(op, 0.0) > 0]
            pairs = [(p, m) for p, m in pairs if p > 0]
            if pairs:
                p, m = np.array(pairs).T
                rep.ops.append({"op": op, "set": name, "n": len(p), "predicted_s": float(np.mean(p)),
                                "measured_s": float(np.mean(m)), "mape": mape(p, m)})
        rep.step_mape[name] = mape([costs[id(s)].host.step_with(s.parts) for s in sub], [s.step_s for s in sub])
    held_ids = {id(s) for s in held}
    for s in sorted(samples, key=lambda s: (s.role, s.size)):
        pred = costs[id(s)].host.step_with(s.parts)
        rep.steps.append({"role": s.role, "size": s.size, "set": "held-out" if id(s) in held_ids else "fit",
                          "repeats": s.repeats, "predicted_s": pred, "measured_s": s.step_s,
                          "err": pred / s.step_s - 1})
    return rep


def compare_serving(plan: Plan, records: list[dict], prof: Profile) -> dict[str, float]:
    """Predicted vs measured TTFT/TPOT p50/p90 of a serving run (serve_replay.py: the executor's
    time-shared lockstep replay, gated, and the simulator's plan-as-planned replay)."""
    from .serve_replay import compare

    return compare(plan, records, prof)


def compare_vllm_bench(plan: Plan, bench, prof: Profile) -> dict[str, float | str]:
    """What a `vllm bench serve` run measured vs its requests through the simulator: TTFT / TPOT
    statistics as '{stat}_predicted_s', '{stat}_measured_s', '{stat}_err', and 'workload' saying what
    was replayed. `bench`: a bench_fit.Bench (--save-detailed: each request at its own send time and
    lengths, bench_fit.replay), or io.read_vllm_bench's summary of a run without per-request data
    (every request at the bench's mean lengths, at its rate or concurrency: bench_workload.py)."""
    from .bench_fit import Bench, replay, statistics

    if isinstance(bench, Bench):
        meas = statistics(bench, bench.ttft_s, bench.tpot_s)
        pred = statistics(bench, *replay(plan, bench, prof))
        said = f"per-request send times and lengths of {len(bench.isl)} requests (--save-detailed)"
    else:
        from rackplan.sim.simulator import simulate

        from .bench_workload import bench_workload

        wl = bench_workload(bench, plan)
        sim = simulate(plan, wl, prof)
        said = wl.description
        meas = {f"{m}_p{q}": bench.get(f"{m}_{'median' if q == 50 else 'p90'}_s", math.nan)
                for m in ("ttft", "tpot") for q in (50, 90)}
        pred = {f"{m}_p{q}": float(np.nanpercentile(arr, q)) for m, arr in (("ttft", sim.ttft_s), ("tpot", sim.tpot_s))
                for q in (50, 90)}
    out: dict[str, float | str] = {"workload": said}
    for k, m in meas.items():
        if m is not None and np.isfinite(m) and m > 0:
            out.update({f"{k}_predicted_s": pred[k], f"{k}_measured_s": m, f"{k}_err": pred[k] / m - 1})
    return out


def compare_op_database(tables: dict, hw, profiles: list[Profile], elsewhere: dict | None = None) -> list[dict]:
    """Per op class of the op-database tables: MAPE of each profile's prediction over all the class's
    rows and over its held-out rows (the seeded split the importer holds out), side by side. `elsewhere`:
    {GEMM class: (label, gemm_perf table of another framework)}, the graph-timed tables the importer fits
    those classes from (opdb_import.GRAPH_TIMED_SOURCE); their rows are added as the class `key [label]`."""
    from .opdb_fit import split
    from .opdb_import import class_rows
    from .opdb_ops import gemm_rows

    out: dict[str, dict] = {}
    for prof in profiles:
        extra = [dataclasses.replace(r, key=f"{r.key} [{label}]") for key, (label, table) in (elsewhere or {}).items()
                 for r in gemm_rows({"gemm_perf": table}, hw) if r.key == key]
        for rows in class_rows(tables, hw, prof) + extra:
            _, held = split(len(rows.seconds))
            every = np.arange(len(rows.seconds))
            row = out.setdefault(rows.key, {"class": rows.key, "table": rows.table.name, "rows": len(every)})
            row[prof.name] = {"all": mape(rows.predict(prof, every), rows.seconds),
                              "held_out": mape(rows.predict(prof, held), rows.seconds[held]) if len(held) else None}
    return list(out.values())
