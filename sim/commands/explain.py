"""Where one step of each pool of a plan spends its time, op by op, and how much KV cache each rank holds.

For each pool of the plan (prefill, decode, aggregated) one step is priced by the simulator's own step
pricer (sim/cost/step.py, StepModel: what the simulator and the planner's estimate advance by) and
shown op by op: seconds, share of the step, the roofline bound at the datasheet peaks (compute or HBM
bandwidth, and the share of it the op reaches; links and host work named as such), the efficiency curve
of the profile that priced it (measured, a fallback, the dtype family's, or the datasheet scalar), and
that curve's fit error. The rows sum to the step's period (the step, plus any wait for the API server).
Decode and aggregated pools: a decode step at the plan's batch per rank (the planner's estimate, else the
layout's cap, at most what its KV cache holds) or --batch, at the workload's mean decode context; prefill
pools: a full step of the workload's mean uncached prompt after its cached prefix.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field

from rackplan.args import positive_int
from rackplan.specs import (
    HardwareSpec,
    Layout,
    ModelSpec,
    Profile,
    load_hardware,
    load_model,
    load_plan,
    load_workload,
    ops,
    profile_origin,
    resolve_profile,
)
from rackplan.specs.hardware import DTYPE_FAMILY

from ..cost import efficiency
from ..cost.attention import dense_backend
from ..cost.memory import kv_capacity_tokens, reserve_bytes, weight_bytes_per_rank
from ..cost.roofline import StepCost
from ..cost.step import KERNEL, CostContext, RankWork, Step
from ..search.estimate import Traffic, traffic_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", default="v41-flash-gb300-nvl72", help="plan YAML path or embedded name "
                   "(default: %(default)s)")
    p.add_argument("--batch", type=positive_int, default=None, metavar="B",
                   help="sequences per rank of the decode (and aggregated) step (default: the plan's estimated "
                        "batch, else its layout's cap, at most what the KV cache holds)")
    p.add_argument("--workload", help="workload YAML path or name (default: the plan's)")
    p.add_argument("--profile", help="profile name or YAML (default: the plan's, else the hardware's default)")
    p.add_argument("--profile-any-hardware", action="store_true",
                   help="allow a profile fitted on other hardware than the plan's")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")


@dataclass(frozen=True)
class OpRow:
    """One op of a step: its seconds (summed over the layers that run it) and where they come from."""

    name: str
    seconds: float
    share: float  # of the step's period
    bound: str  # "compute 41%", "memory 87%" (share of the roofline the op reaches), "link", "host", ...
    curve: str  # the profile's curve that priced it, and what kind
    fit_error_pct: float  # that curve's fit error (MAPE %), NaN where none is recorded


@dataclass(frozen=True)
class KvRoom:
    """KV-cache room of one rank of a layout (sim/cost/memory.py)."""

    weights_gb: float  # weights one rank holds
    reserve_gb: float  # HBM kept free of weights and KV
    kv_tokens: float  # context tokens of KV the rank holds
    sequences: float  # of the workload's mean longest context (ISL + OSL)


@dataclass(frozen=True)
class PoolStep:
    """One priced step of one pool."""

    pool: str
    layout: str
    title: str
    period_s: float  # what the simulator advances by: the step, or the API server's time when longer
    rows: tuple[OpRow, ...]
    kv: KvRoom
    step: Step = field(repr=False, compare=False)  # the step priced (per-rank work x DP ranks)


def plan_batch(plan, layout: Layout, kv_limit: int) -> int:
    """The decode batch per rank a plan runs at: the planner's estimate (plan.predicted est_batch_per_rank,
    rounded) where it has one, else the layout's cap; never above what the KV cache holds."""
    est = plan.predicted.get("est_batch_per_rank")
    b = max(1, round(est)) if est else layout.max_batch_per_rank
    return max(1, min(b, layout.max_batch_per_rank, kv_limit or 1))


def explain(plan, model: ModelSpec, hw: HardwareSpec, prof: Profile, tr: Traffic,
            batch: int | None = None) -> list[PoolStep]:
    """One priced step per pool of the plan, op by op (module docstring)."""
    out = []
    for pool in ("prefill", "decode", "aggregated"):
        for lay in getattr(plan, pool):
            cx = CostContext(model, hw, lay, prof, tr.skew)
            kv = kv_room(model, hw, lay, tr)
            if pool == "prefill":
                per_step = max(1, int(lay.max_tokens_per_step // tr.new))
                work = RankWork(0.0, 0.0, ((per_step, tr.new, tr.cached),))
                title = (f"full prefill step: {per_step} x {tr.new:,.0f} new tokens per rank after {tr.cached:,.0f} "
                         "cached")
            else:
                b = batch or plan_batch(plan, lay, int(kv.sequences))
                work = RankWork(float(b), float(b * tr.ctx_mean))
                title = f"decode step: {b} sequences per rank at mean context {tr.ctx_mean:,.0f}"
                if lay.speculation is not None:
                    title += (f", {lay.speculation.num_tokens} draft tokens ({lay.speculation.acceptance_length:g} "
                              "emitted per sequence per step)")
            step = Step.uniform(lay.dp, work)
            cost = cx.step_model.price(step)
            out.append(PoolStep(pool, lay.tag, title, cost.period_s, op_rows(cx, cost, pool), kv, step))
    return out


def kv_room(model: ModelSpec, hw: HardwareSpec, lay: Layout, tr: Traffic) -> KvRoom:
    cap = kv_capacity_tokens(model, hw, lay)
    return KvRoom(sum(weight_bytes_per_rank(model, lay).values()) / 1e9, reserve_bytes(model, hw, lay) / 1e9,
                  cap, max(cap, 0.0) / tr.ctx_max)


def op_rows(cx: CostContext, cost: StepCost, pool: str) -> tuple[OpRow, ...]:
    """The step's ops merged by name, largest first, plus the API-server wait where the step waits for it:
    their seconds sum to cost.period_s."""
    merged: dict[str, list] = {}
    for op in cost.ops:
        acc = merged.setdefault(op.name, [0.0, 0.0, 0.0, op.kind])
        acc[0] += op.seconds
        acc[1] += op.flops
        acc[2] += op.bytes
    period = cost.period_s
    phase = "prefill" if pool == "prefill" else "decode"
    rows = [OpRow(name, sec, sec / period, _bound(cx, name, kind, fl, by, sec), *_curve(cx, name, phase))
            for name, (sec, fl, by, kind) in merged.items() if sec != 0.0]
    if cost.api_wait_s > 0:
        rows.append(OpRow("host.api_wait", cost.api_wait_s, cost.api_wait_s / period, "host (API server)",
                          "host block of the profile", _fit(cx.prof, "host")))
    return tuple(sorted(rows, key=lambda r: -abs(r.seconds)))


def _bound(cx: CostContext, name: str, kind: str, flops: float, nbytes: float, sec: float) -> str:
    """What bounds an op on the roofline at the datasheet peaks, and the share of that bound it reaches."""
    if kind == "comm":
        return "link" if name != "dbo.overlap" else "overlap (hidden)"
    if kind == "cpu":
        return "host"
    if kind == "idle":
        return "idle"
    dt = cx.model.dtypes
    dtype = dt.expert_compute_dtype if name == "moe.experts" else (
        dt.attention_compute_dtype if name == "attn.core" else dt.compute)
    t_compute = flops / cx.hw.flops_for(dtype)
    t_mem = nbytes / cx.hw.hbm_bw
    if t_compute <= 0 and t_mem <= 0:
        return "fixed"
    which, t = ("compute", t_compute) if t_compute >= t_mem else ("memory", t_mem)
    return f"{which} {t / sec:.0%}" if sec > 0 else which


def _classes(cx: CostContext, name: str, phase: str) -> tuple[str, ...]:
    """The profile's op classes (efficiency curves) that price op `name` (sim/cost/efficiency.py's table)."""
    m, lay = cx.model, cx.layout
    dt = m.dtypes
    kd = efficiency.kernel_dtype
    if name in ("moe.experts", "moe.route"):
        # the engine's kernel (efficiency.backend_dtype) behind DeepEP's kernel of the phase (step.py KERNEL)
        a2a = KERNEL[phase == "prefill"] if lay.deepep else ""
        ed = efficiency.backend_dtype(cx.prof, kd(dt.expert_weights, dt.expert_compute_dtype, cx.prof),
                                      efficiency.expert_backend(lay, cx.hw), a2a)
        return (f"experts.{ed}",) if name == "moe.experts" else (f"moe.route.{ed}",)
    gemms = {op.name: op for op in ops.model_ops(m, lay, phase) if op.gemms}
    if name in gemms:
        return tuple(dict.fromkeys(f"gemm.{kd(g.weight_dtype, g.compute_dtype)}" for g in gemms[name].gemms))
    if name == "attn.core":
        return (f"attn.{phase}.{m.attention.kind}.{dt.attention_compute_dtype}",)
    if name in ("attn.allreduce", "ffn.allreduce"):
        return (f"allreduce.tp{lay.tp}",)
    if name == "quantize":
        return (f"quantize.{dt.compute}",)
    if name == "mhc":
        return ("mhc.pre", "mhc.post")
    if name in ("moe.dispatch", "moe.combine"):
        return ("a2a",)
    if name.startswith("host"):
        return ("host",)
    if name in ("norm", "rope", "sample", "engram", "weights.offload"):
        return ("memory",)
    return ()


def _curve(cx: CostContext, name: str, phase: str) -> tuple[str, float]:
    """(which curve priced op `name`, its fit error %) (NaN: none recorded)."""
    prof = cx.prof
    classes = _classes(cx, name, phase)
    if name == "draft":
        if cx.model.draft is not None and cx.model.draft.kind == "mtp":
            return "one target layer and the LM head per MTP pass, the layer's own curves (sim/cost/prices.py " \
                   "mtp_passes)", math.nan
        return "the drafter's own GEMM and attention pricing (sim/cost/draft.py)", math.nan
    if not classes:
        return "derived (no curve of its own)", math.nan
    backend = efficiency.attention_backend(cx.layout, cx.hw, cx.model.attention.kind)
    if name == "attn.core" and phase == "decode" and backend is not None and all(
            dense_backend(c, backend) for c in cx.model.attention.kv):  # (the engine's kernel, efficiency.py)
        return (f"{backend}'s published rate, {efficiency.ATTENTION_BACKEND_EFF[backend]:.3f} of the BF16 peak, "
                f"in place of {classes[0]} (the engine's kernel)"), math.nan
    parts, errors = [], []
    for cls in classes:
        used, how = _source(prof, cls)
        parts.append(f"{used} ({how})" if used == cls else f"{used} ({how} for {cls})")
        err = _fit(prof, used, cls, name)
        if err == err:
            errors.append(err)
    path = efficiency.prefill_backend(cx.layout, cx.hw, cx.model.attention.kind)
    if name == "attn.core" and phase == "prefill" and path is not None and any(
            dense_backend(c, path) for c in cx.model.attention.kv):  # (the engine's prefill path, efficiency.py)
        parts.append(f"the engine's {path} prefill path: its K materialisation and output copy at HBM bandwidth "
                     "(the kernel at the curve: no published rate)")
    return "; ".join(parts), max(errors) if errors else math.nan


def _source(prof: Profile, cls: str) -> tuple[str, str]:
    """(the curve or parameter block the profile prices class `cls` with, what kind it is)."""
    if cls == "a2a":
        return "a2a", "fitted alpha / beta per EP size" if prof.a2a else "datasheet link"
    if cls == "host":
        return "host", "host block"
    if cls == "memory":
        return "memory", "mem_eff scalar"
    if cls in prof.curves:
        return cls, "measured curve"
    if prof.fallbacks.get(cls) in prof.curves:
        return prof.fallbacks[cls], "fallback"
    head, _, dtype = cls.rpartition(".")
    if dtype in DTYPE_FAMILY and f"{head}.{DTYPE_FAMILY[dtype]}" in prof.curves:
        return f"{head}.{DTYPE_FAMILY[dtype]}", "dtype family"
    return cls, "datasheet scalar"


def _fit(prof: Profile, *keys: str) -> float:
    """The first fit error the profile records under any of `keys` (NaN: none); 'a2a' matches 'a2a.*'."""
    for key in keys:
        if key in prof.fit_error:
            return float(prof.fit_error[key])
        near = [v for k, v in prof.fit_error.items() if k.startswith(key + ".")] if key in ("a2a", "host") else []
        if near:
            return float(max(near))
    return math.nan


def print_tables(plan, prof: Profile, origin: str, steps: list[PoolStep]) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 150)
    con.print(f"[bold]{plan.name}[/]: {plan.model} on {plan.hardware}, {plan.summary}")
    con.print(f"profile {prof.name} ({origin + ', ' if origin else ''}{prof.describe()}); the cost model's "
              "analytic step price, as the simulator prices its steps")
    for s in steps:
        t = Table(title=f"{s.pool} {s.layout}: {s.title}: {s.period_s * 1e3:,.3f} ms per step")
        for col, just in (("op", "left"), ("ms", "right"), ("share", "right"), ("roofline bound (share reached)",
                          "left"), ("priced by", "left"), ("fit error %", "right")):
            t.add_column(col, justify=just)
        for r in s.rows:
            t.add_row(r.name, f"{r.seconds * 1e3:,.3f}", f"{r.share:.1%}", r.bound, r.curve,
                      f"{r.fit_error_pct:.1f}" if r.fit_error_pct == r.fit_error_pct else "-")
        t.add_row("[bold]step[/]", f"[bold]{sum(r.seconds for r in s.rows) * 1e3:,.3f}[/]", "100.0%", "", "", "")
        con.print(t)
        k = s.kv
        con.print(f"KV cache per rank: {k.kv_tokens:,.0f} context tokens ({k.sequences:,.1f} sequences of ISL + "
                  f"OSL) after {k.weights_gb:,.1f} GB of weights and {k.reserve_gb:,.1f} GB kept free "
                  "(sim/cost/memory.py)\n")


def run(args) -> int:
    plan = load_plan(args.plan)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    workload = load_workload(args.workload or plan.workload or "isl4k-osl1k")
    prof = resolve_profile(args.profile, plan.profile, plan.hardware, args.profile_any_hardware)
    steps = explain(plan, model, hw, prof, traffic_of(workload, model), args.batch)
    if args.json:
        doc = {"plan": plan.name, "layout": plan.summary, "profile": prof.name, "workload": workload.name,
               "steps": [{"pool": s.pool, "layout": s.layout, "title": s.title, "period_s": s.period_s,
                          "kv": asdict(s.kv), "rows": [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                                                        for k, v in asdict(r).items()} for r in s.rows]}
                         for s in steps]}
        print(json.dumps(doc, indent=2))
    else:
        print_tables(plan, prof, profile_origin(args.profile, plan.profile, plan.hardware), steps)
    return 0
