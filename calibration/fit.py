"""Fit a Profile to measured steps, through the real cost model (sim.cost.step.step_cost).

Four stages, each a robust least-squares fit on relative error:
  1. compute ops (GEMMs, attention, router, lm_head, experts): gemm_eff_max, gemm_m_half, mem_eff,
     mem_bytes_half, op_fixed_s, attn_eff, shared by every op the roofline prices;
  2. dispatch / combine: alpha_s and bw_eff per (kernel, phase) on the local link;
  3. host: cpu_step_s and cpu_per_request_s so that device ops + host time = measured step time
     (what the simulator consumes); launch_s comes from the microbenchmark when given;
  4. per-op scale: measured / predicted median per op, the residual the shared curves cannot carry.
     Profile has no field for it yet: it is stored in provenance["op_scale"] (proposed field
     `Profile.op_scale: dict[str, float]`, applied to each op's seconds in step_cost).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from sim.cost.step import CostContext, step_cost
from sim.specs import A2AParams, HardwareSpec, ModelSpec, Plan, Profile, SpecError

from .robust import check_points, fit_relative, mape
from .samples import DEVICE_OPS, StepSample, layout_for

COMPUTE_OPS = ("attn.proj", "attn.core", "router", "moe.experts", "shared_expert", "dense_ffn", "lm_head")
COMM_OPS = ("moe.dispatch", "moe.combine")
# stage 1 parameters: name, lower, upper
COMPUTE_PARAMS = (("gemm_eff_max", 1e-3, 1.0), ("gemm_m_half", 0.0, 1e5), ("mem_eff", 1e-3, 1.0),
                  ("mem_bytes_half", 0.0, 1e9), ("op_fixed_s", 0.0, 1e-2), ("attn_eff", 1e-3, 1.0))
MIN_SAMPLES = 3  # distinct step shapes needed before any curve is fitted


class Fitter:
    """Prices samples with a candidate profile; caches nothing (profiles change every call)."""

    def __init__(self, plan: Plan, model: ModelSpec, hw: HardwareSpec, samples: list[StepSample]):
        if len({(s.role, s.size) for s in samples}) < MIN_SAMPLES:
            raise SpecError("measurements", "steps", f"at least {MIN_SAMPLES} distinct step shapes to fit",
                            len({(s.role, s.size) for s in samples}))
        self.plan, self.model, self.hw, self.samples = plan, model, hw, samples

    def price(self, prof: Profile, s: StepSample):
        cx = CostContext(self.model, self.hw, layout_for(self.plan, s.role), prof)
        return step_cost(cx, s.rb)

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


def fit_compute(fx: Fitter, base: Profile) -> Profile:
    """Stage 1: shared roofline curves over every compute op."""
    _, meas = fx.op_pairs(base, COMPUTE_OPS)
    check_points(meas, len(COMPUTE_PARAMS), "measurements", "compute op seconds")
    names = [p[0] for p in COMPUTE_PARAMS]

    def make(p):
        return dataclasses.replace(base, **{n: float(v) for n, v in zip(names, p)})

    x0 = [getattr(base, n) for n in names]
    p, _ = fit_relative(lambda p: fx.op_pairs(make(p), COMPUTE_OPS)[0], x0,
                        [p[1] for p in COMPUTE_PARAMS], [p[2] for p in COMPUTE_PARAMS], meas,
                        "measurements", "compute op seconds")
    return make(p)


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
                        "measurements", f"{op} seconds ({kernel})")
    return make(p)


def fit_host(fx: Fitter, prof: Profile, launch_s: float | None = None) -> Profile:
    """Stage 3: host time so that predicted step = measured step (async scheduling off on CPU)."""
    if launch_s is not None:
        prof = dataclasses.replace(prof, launch_s=launch_s)
    steps = np.array([s.step_s for s in fx.samples])
    check_points(steps, 2, "measurements", "step seconds")

    def make(p):
        return dataclasses.replace(prof, cpu_step_s=float(p[0]), cpu_per_request_s=float(p[1]))

    def pred(p):
        return np.array([fx.price(make(p), s).seconds for s in fx.samples])

    p, _ = fit_relative(pred, [prof.cpu_step_s, prof.cpu_per_request_s], [0.0, 0.0],
                        [float(np.max(steps)), float(np.max(steps))], steps, "measurements", "step seconds")
    return make(p)


def fit_op_scale(fx: Fitter, prof: Profile) -> dict[str, float]:
    """Stage 4: median measured / predicted per device op (1.0 where the op was not measured)."""
    out = {}
    for op in DEVICE_OPS:
        pred, meas = fx.op_pairs(prof, [op])
        if len(meas):
            out[op] = float(np.median(meas / pred))
    return out


def op_errors(fx: Fitter, prof: Profile, op_scale: dict[str, float] | None = None) -> dict[str, float]:
    """MAPE (%) per op, of the step and of host time, over the fitter's samples."""
    out = {}
    for op in DEVICE_OPS:
        pred, meas = fx.op_pairs(prof, [op])
        if len(meas):
            out[op] = mape(pred * (op_scale or {}).get(op, 1.0), meas)
    costs = [fx.price(prof, s) for s in fx.samples]
    out["step"] = mape([c.seconds for c in costs], [s.step_s for s in fx.samples])
    host = [(c.breakdown().get("host.exposed", 0.0), s.host_s) for c, s in zip(costs, fx.samples) if s.host_s > 0]
    if host:
        out["host"] = mape(*zip(*host))
    return out


def fit_profile(fx: Fitter, base: Profile, name: str, launch_s: float | None = None) -> tuple[Profile, dict]:
    """All stages; returns the profile (fit_error filled, MAPE % per op) and the op scales."""
    prof = fit_compute(fx, dataclasses.replace(base, name=name, hardware=fx.hw.name))
    prof = fit_comm(fx, prof)
    prof = fit_host(fx, prof, launch_s)
    scale = fit_op_scale(fx, prof)
    errs = op_errors(fx, prof, scale)
    return dataclasses.replace(prof, fit_error={k: round(v, 3) for k, v in errs.items()}), scale
