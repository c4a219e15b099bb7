"""Fit a Profile to measured steps, through the real cost model (sim.cost.step.step_cost).

Three stages, each a robust least-squares fit on relative error:
  1. compute ops (GEMMs, attention, router, lm_head, experts): every op is priced as
        seconds = op_fixed[op] x layers + op_scale[op] x roofline(op; shared curves)
     Small ops are dominated by a fixed cost per call (host dispatch of several kernels on CPU,
     launch and latency floors on GPU) that no multiplicative factor can carry, so each op gets
     its own fixed seconds per layer and its own efficiency (op_scale), both linear given the
     shared roofline curves (gemm_eff_max, gemm_m_half, mem_bytes_half, attn_eff). The curves are
     fitted outside, the per-op pairs inside by iteratively reweighted least squares (variable
     projection): four nonlinear parameters, two linear ones per op;
  2. dispatch / combine: alpha_s and bw_eff per (kernel, phase) on the local link;
  3. host: the profile's `host:` block (sim/cost/host.py parts). Without per-part host records,
     the step residual: prepare_step_s and prepare_per_seq_s so that device ops + the host parts
     the measured step ran (StepSample.parts) = measured step time; launch_s comes from the
     microbenchmark when given.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from scipy.optimize import least_squares

from rackplan.sim.cost.step import CostContext, op_layers, step_cost
from rackplan.specs import A2AParams, HardwareSpec, ModelSpec, Plan, Profile, SpecError
from rackplan.specs.ops import COMPUTE_OPS, DEVICE_OPS

from .robust import check_points, fit_relative, mape
from .samples import StepSample, layout_for, plan_seconds

# stage 1 shared-curve parameters: name, lower, upper
SHARED_PARAMS = (("gemm_eff_max", 1e-3, 1.0), ("gemm_m_half", 0.0, 1e4), ("mem_bytes_half", 0.0, 1e8),
                 ("attn_eff", 1e-3, 1.0))
MIN_SAMPLES = 3  # distinct step shapes needed before any curve is fitted
MIN_PHASE_POINTS = 3  # shapes of one phase before an op gets a line of its own for that phase
SOFT_L1 = 0.05  # relative error at which the robust loss turns linear (noisy shared machine)


class Fitter:
    """Prices samples with a candidate profile; caches nothing (profiles change every call)."""

    def __init__(self, plan: Plan, model: ModelSpec, hw: HardwareSpec, samples: list[StepSample]):
        if len({(s.role, s.size) for s in samples}) < MIN_SAMPLES:
            raise SpecError("measurements", "steps", f"at least {MIN_SAMPLES} distinct step shapes to fit",
                            len({(s.role, s.size) for s in samples}))
        # measured on cores its busy ranks shared: fitted as one rank alone (the cost model applies a plan's share)
        self.plan, self.model, self.hw, self.samples = plan, model, hw, [s.alone(hw) for s in samples]

    def price(self, prof: Profile, s: StepSample):
        cx = CostContext(self.model, self.hw, layout_for(self.plan, s.role), prof)
        return step_cost(cx, s.rb)

    def step_seconds(self, prof: Profile, s: StepSample) -> float:
        """Predicted seconds of the measured step: device + the host parts it ran."""
        return self.price(prof, s).host.step_with(s.parts)

    def op_pairs(self, prof: Profile, names) -> tuple[np.ndarray, np.ndarray]:
        """(predicted, measured) seconds over every (sample, op) measured with a positive time."""
        pred, meas = [], []
        for s in self.samples:
            bd = self.price(prof, s).breakdown()
            for n in names:
                if s.ops.get(n, 0.0) > 0 and bd.get(n, 0.0) > 0:
                    pred.append(bd[n])
                    meas.append(s.ops[n])
        return np.array(pred), np.array(meas)


def _roofline(prof: Profile) -> Profile:
    """The profile's shared curves alone: no per-op terms, no per-kernel fixed time."""
    return dataclasses.replace(prof, op_scale={}, op_fixed={}, op_fixed_s=0.0)


def fit_op_line(layers: float, roof: np.ndarray, meas: np.ndarray, iters: int = 20) -> tuple[float, float]:
    """(fixed seconds per layer >= 0, scale > 0) minimising the soft-L1 relative error of
    layers x fixed + scale x roof against meas (IRLS on the linear least-squares problem)."""
    a = np.stack([np.full_like(roof, layers), roof], 1) / meas[:, None]  # [N, 2]; target: ones
    w = np.ones(len(meas))
    coef = np.array([0.0, 1.0])
    for _ in range(iters):
        sw = np.sqrt(w)[:, None]
        coef = np.linalg.lstsq(a * sw, sw[:, 0], rcond=None)[0]
        if coef[0] < 0:  # no fixed part: scale alone
            coef = np.array([0.0, float(np.sum(w * a[:, 1]) / np.sum(w * a[:, 1] ** 2))])
        if coef[1] <= 1e-6:  # no work part: fixed alone
            coef = np.array([float(np.sum(w * a[:, 0]) / np.sum(w * a[:, 0] ** 2)), 1e-6])
        err = a @ coef - 1.0
        w = 1.0 / np.sqrt(1.0 + (err / SOFT_L1) ** 2)
    return float(coef[0]), float(coef[1])


def _compute_table(fx: Fitter, prof: Profile) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per "op/phase" key: (roofline seconds, measured seconds) over the samples that measured it.
    Decode and prefill run different code for one op (attention above all), so each phase with
    enough shapes gets its own line; a phase with fewer falls back to the op's pooled line."""
    rows: dict[tuple, tuple[list, list]] = {}
    roof = _roofline(prof)
    for s in fx.samples:
        bd = fx.price(roof, s).breakdown()
        for op in COMPUTE_OPS:
            if s.ops.get(op, 0.0) > 0 and bd.get(op, 0.0) > 0:
                r, m = rows.setdefault((op, s.role), ([], []))
                r.append(bd[op])
                m.append(s.ops[op])
    out = {}
    for op in COMPUTE_OPS:
        phases = [ph for ph in ("decode", "prefill") if (op, ph) in rows]
        if all(len(rows[(op, ph)][1]) >= MIN_PHASE_POINTS for ph in phases):
            out.update({f"{op}/{ph}": tuple(map(np.array, rows[(op, ph)])) for ph in phases})
        elif phases:
            out[op] = tuple(np.concatenate([np.array(rows[(op, ph)][i]) for ph in phases]) for i in (0, 1))
    return out


def _per_op(fx: Fitter, prof: Profile) -> tuple[dict, dict, np.ndarray]:
    """Per-op fixed and scale for the profile's shared curves, and every relative error."""
    fixed, scale, errs = {}, {}, []
    for key, (roof, meas) in _compute_table(fx, prof).items():
        layers = op_layers(fx.model, key.split("/")[0])
        f, k = fit_op_line(layers, roof, meas) if len(meas) >= 2 else (0.0, float(np.median(meas / roof)))
        fixed[key], scale[key] = f, k
        errs.append((layers * f + k * roof) / meas - 1.0)
    return fixed, scale, np.concatenate(errs) if errs else np.zeros(0)


def fit_compute(fx: Fitter, base: Profile) -> Profile:
    """Stage 1: shared roofline curves (outer, nonlinear) and per-op fixed + scale (inner, linear)."""
    table = _compute_table(fx, base)
    check_points(np.concatenate([m for _, m in table.values()]) if table else np.zeros(0),
                 len(SHARED_PARAMS) + 2, "measurements", "compute op seconds")
    names = [p[0] for p in SHARED_PARAMS]
    lo, hi = np.array([p[1] for p in SHARED_PARAMS]), np.array([p[2] for p in SHARED_PARAMS])

    def make(p):
        return dataclasses.replace(base, op_fixed_s=0.0, **{n: float(v) for n, v in zip(names, p)})

    x0 = np.clip([getattr(base, n) for n in names], lo, hi)
    res = least_squares(lambda p: _per_op(fx, make(p))[2], x0, bounds=(lo, hi), loss="soft_l1",
                        f_scale=SOFT_L1, x_scale="jac", max_nfev=200)
    prof = make([_sig(x) for x in res.x])
    fixed, scale, _ = _per_op(fx, prof)
    return dataclasses.replace(prof, op_fixed={k: _sig(v) for k, v in fixed.items()},
                               op_scale={k: _sig(v) for k, v in scale.items()})


def fit_comm(fx: Fitter, prof: Profile) -> Profile:
    """Stage 2: one (alpha_s, bw_eff) per kernel kind and phase on the local link."""
    entries = list(prof.a2a) or [A2AParams("low_latency", "nvlink", 1e-4, 0.5)]
    for kernel, role in (("low_latency", "decode"), ("high_throughput", "prefill")):
        for phase, op in (("dispatch", "moe.dispatch"), ("combine", "moe.combine")):
            sub = [s for s in fx.samples if s.role == role and s.ops.get(op, 0) > 0]
            if len(sub) < 2:
                continue  # this kernel did not run: keep the prior entry
            entries = _fit_entry(fx, prof, entries, sub, kernel, phase, op)
    return dataclasses.replace(prof, a2a=tuple(entries))


def _fit_entry(fx, prof, entries, sub, kernel, phase, op):
    keep = [e for e in entries if not (e.kernel == kernel and e.link == "nvlink" and e.phase == phase)]
    sx = Fitter.__new__(Fitter)
    sx.__dict__.update(fx.__dict__, samples=sub)

    def make(p):
        return keep + [A2AParams(kernel=kernel, link="nvlink", phase=phase, alpha_s=float(p[0]),
                                 bw_eff=float(p[1]))]

    def pred(p):
        return sx.op_pairs(dataclasses.replace(prof, a2a=tuple(make(p))), [op])[0]

    meas = np.array([s.ops[op] for s in sub])
    p, _ = fit_relative(pred, [float(np.min(meas)) / 2, 0.5], [0.0, 1e-3], [float(np.max(meas)), 1.5], meas,
                        "measurements", f"{op} seconds ({kernel})", f_scale=SOFT_L1)
    return make([_sig(p[0]), _sig(p[1])])


def fit_host(fx: Fitter, prof: Profile, launch_s: float | None = None) -> Profile:
    """Stage 3 without per-part host records: the in-step host work (the 'host' record: input
    preparation and sampling together) as prepare_step_s + prepare_per_seq_s, so that predicted
    step = measured step (sampling's own terms set to 0: the residual carries them)."""
    hp = dataclasses.replace(prof.host, sample_step_s=0.0, sample_per_seq_s=0.0, sample_per_draft_s=0.0)
    if launch_s is not None:
        hp = dataclasses.replace(hp, launch_s=launch_s)
    steps = np.array([s.step_s for s in fx.samples])
    check_points(steps, 2, "measurements", "step seconds")

    def make(p):
        return dataclasses.replace(prof, host=dataclasses.replace(hp, prepare_step_s=float(p[0]),
                                                                  prepare_per_seq_s=float(p[1])))

    def pred(p):
        return np.array([fx.step_seconds(make(p), s) for s in fx.samples])

    p, _ = fit_relative(pred, [hp.prepare_step_s, hp.prepare_per_seq_s], [0.0, 0.0],
                        [float(np.max(steps)), float(np.max(steps))], steps, "measurements", "step seconds",
                        f_scale=SOFT_L1)
    return make([_sig(p[0]), _sig(p[1])])


def op_errors(fx: Fitter, prof: Profile) -> dict[str, float]:
    """MAPE (%) per op and of the step, over the fitter's samples."""
    out = {}
    for op in DEVICE_OPS:
        pred, meas = fx.op_pairs(prof, [op])
        if len(meas):
            out[op] = mape(pred, meas)
    out["step"] = mape([fx.step_seconds(prof, s) for s in fx.samples], [s.step_s for s in fx.samples])
    return out


def fit_profile(fx: Fitter, base: Profile, name: str, launch_s: float | None = None) -> Profile:
    """All stages; returns the profile with fit_error (MAPE % per op and step on the fit set)."""
    prof = fit_compute(fx, dataclasses.replace(base, name=name, hardware=fx.hw.name))
    prof = fit_comm(fx, prof)
    prof = fit_host(fx, prof, launch_s)
    errs = op_errors(fx, prof)
    return dataclasses.replace(prof, fit_error={k: round(v, 3) for k, v in errs.items()})


def fit_iteration(records: list[dict]) -> float | None:
    """Engine-loop seconds per step from serving runs' per-tick 'host' records (role 'serve'):
    median over ticks of the tick's overhead / the steps it ran. None without serving records.
    Runs with separate instances (time_shared false) record each instance's loop apart: the
    decode loop's is the one every token pays (a prefill loop's extra work is the KV hand-off)."""
    loops = [r for r in records if r["op"] == "host" and r["role"] == "serve"]
    if any(r["shape"].get("time_shared") is False for r in loops):
        loops = [r for r in loops if r["shape"].get("decode_steps")]
    per_step = [r["seconds"] / n for r in loops
                for n in [r["shape"].get("prefill_steps", 0) + r["shape"].get("decode_steps", 0)] if n > 0]
    return float(np.median(per_step)) if per_step else None


MIN_LOOP_STEPS = 20  # decode-leader steps of serving runs before the loop's per-request terms are fitted


def loop_steps(records: list[dict], role: str = "decode") -> list[tuple[float, int, int]]:
    """(host seconds, admitted, finished) of every `role`-leader step of serving runs with separate
    instances: the loop's 'host' record (role 'serve': the loop's time outside the step; decode: the KV
    receive of newly seated requests and the executor's booking; prefill: the arrivals it routes and the
    headers it reads) + the plan the step waited for (samples.plan_seconds: the scheduler and its
    control-plane round trips, executor/disagg.py Loop.aside; the fit's steps leave it out), against the
    requests the step admitted and finished (shape admitted_global / finished_global)."""
    loops = {(r.get("_run", 0), r["shape"].get("instance"), r["step"]): r for r in records
             if r["op"] == "host" and r["role"] == "serve" and r["shape"].get(f"{role}_steps")
             and r["shape"].get("time_shared") is False}
    plans: dict[tuple, float] = {}  # the leader's plan seconds of each step (samples.plan_seconds)
    counts: dict[tuple, tuple[int, int]] = {}
    for r in records:
        key = (r.get("_run", 0), r["shape"].get("instance"), r["step"])
        loop = loops.get(key) if r["role"] == role else None
        if loop is None or loop["rank"] != r["rank"] or r["op"] not in ("host.exposed", "host.sample"):
            continue  # the leader's records (its rank wrote the loop record)
        plans[key] = plans.get(key, loops[key]["seconds"]) + plan_seconds(r)
        counts[key] = (int(r["shape"].get("admitted_global", 0)), int(r["shape"].get("finished_global", 0)))
    return [(plans[k], *counts[k]) for k in sorted(plans, key=lambda k: (k[0], str(k[1]), k[2]))]


def fit_prefill_intake(records: list[dict]) -> float | None:
    """schedule_per_arrival_s: the prefill leader's host seconds per request it takes in, from serving runs'
    prefill-leader steps (loop_steps(records, "prefill")): host seconds per step = fixed + per request the
    step admitted (a prompt admitted once a request: its routing and header are read in the loop before
    it), soft-L1 relative least squares, each term >= 0; the slope only (the step's fixed host part is
    the sweep's and the decode loop's). None with fewer than MIN_LOOP_STEPS steps or none that admits.

    Why: the executor's prefill leader routes each arrival through the run's store (about ten round trips:
    claim, router counts, queue, inbox) before its next step; the sweep's benchmark steps run none of it,
    and the fit's serving steps leave it out (samples.plan_seconds). The lead's session 17 runs: 0.4-0.6 ms
    a request in the loop record + 0.7-1.2 ms in the plan (RESULTS.md session 18, loop)."""
    rows = loop_steps(records, "prefill")
    if len(rows) < MIN_LOOP_STEPS or not any(a for _, a, _ in rows):
        return None
    y = np.array([s for s, _, _ in rows])
    a = np.array([[1.0, ad] for _, ad, _ in rows])  # [N, 2]
    top = float(np.max(y))
    p, _ = fit_relative(lambda p: a @ p, [float(np.median(y)), 0.0], [0.0, 0.0], [top, top], y,
                        "measurements", "prefill loop host seconds", f_scale=SOFT_L1)
    return _sig(p[1])


def fit_loop_host(records: list[dict]) -> tuple[float, float, float] | None:
    """(schedule_step_s, schedule_per_admit_s, output_per_finish_s) of the decode loop from serving runs:
    host seconds per step (loop_steps) = fixed + per admitted request + per finished request, soft-L1
    relative least squares, each term >= 0. None with fewer than MIN_LOOP_STEPS steps or no step that
    admits or finishes a request (fit_iteration's median then stands alone).

    Why per request: the executor's decode leader reads each newly arrived request's KV header and
    receives its KV before the step, and books each finished one on the control plane after it; a
    step that admits and finishes more requests takes longer (session 16's idle runs: 0.9-1.2 ms at none,
    +0.4-0.6 ms per request admitted or finished at the verified rate, 2.3 of them a step). A median
    over a light engine-loop run priced the loop at its light rate; the simulator's decode instances
    pass each step's admitted and finished counts to these terms (sim/cost/host.py, HostModel.turnover)."""
    rows = loop_steps(records)
    if len(rows) < MIN_LOOP_STEPS or not any(a or f for _, a, f in rows):
        return None
    y = np.array([s for s, _, _ in rows])
    a = np.array([[1.0, ad, fi] for _, ad, fi in rows])  # [N, 3]

    def pred(p):
        return a @ p

    top = float(np.max(y))
    p, _ = fit_relative(pred, [float(np.median(y)), 0.0, 0.0], [0.0, 0.0, 0.0], [top, top, top], y,
                        "measurements", "decode loop host seconds", f_scale=SOFT_L1)
    return _sig(p[0]), _sig(p[1]), _sig(p[2])


def _sig(x: float) -> float:
    """Four significant digits: readable YAML, far below the measurement noise."""
    return float(f"{float(x):.4g}")
