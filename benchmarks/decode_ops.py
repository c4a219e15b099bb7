"""One decode step of a plan's decode layout, op by op, under two profiles side by side.

For one plan, `rackplan explain --plan P [--batch B]` is the user-facing way (every pool's step op by op
with its roofline bound, the curve that priced each op and its fit error, and the KV room); this script
stays for what explain does not do: profiles, accuracy cases and NVLink bandwidths side by side.

Prices `decode_step` (sim/cost/step.py, the planner's and the simulator's pricing) at several
sequences per DP rank, every rank alike, at the workload's mean decode context, and prints each
op's milliseconds per profile, the step, and the TPOT it implies (step / acceptance length under
speculation). Default: the H200 case of docs/plan.md (DeepSeek-V3, decode DEP16 with MTP 1 on h200-sxm).

With --case (repeatable) it prices accuracy cases instead (benchmarks/cases/*.yaml: the case's
model with its `model_overrides`, its first decode or aggregated layout, its workload's mean
decode context; a decode_step case: its instance at its context_tokens), side by side, under one
profile (the first case hardware's default, or --profile): e.g. the V3.2 GB300 TP2 and TP4
instances of the vLLM post, or vllm-gb200-decode-dep8 at --batch 1024.

With --plan it prices a plan's first decode (or aggregated) layout under its own model, hardware, profile
and workload, one column per NVLink bandwidth of --scaleup-gbps (the hardware's scaleup_bw replaced), so
the ops a link what-if moves (moe.dispatch, moe.combine) show next to those it does not.

Run:  python benchmarks/decode_ops.py [--dp 16] [--mtp 1] [--batch 1 8 32 64 128]
      python benchmarks/decode_ops.py --case v32-gb300-mixed-tp2 --case v32-gb300-mixed-tp4-fp8 --batch 64 512
      python benchmarks/decode_ops.py --plan q/plan.yaml --scaleup-gbps 450 900 1800 --batch 64
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rackplan.accuracy.cases import load_cases, resolve  # noqa: E402
from rackplan.sim.cost.step import CostContext, decode_step  # noqa: E402
from rackplan.specs import SpecError, load_hardware, load_model, load_plan, load_profile, load_workload  # noqa: E402
from rackplan.specs.layout import Layout, Speculation  # noqa: E402


def _print_table(label: str, columns: list[tuple[str, CostContext, float]], batches: list[int]) -> None:
    """Each batch's step per column (ms), its TPOT, and every op's ms, largest (last column) first."""
    print(label + "; ms per step: " + " | ".join(name for name, _, _ in columns))
    for b in batches:
        steps = [decode_step(cx, b, b * ctx) for _, cx, ctx in columns]
        parts = [s.breakdown() for s in steps]
        names = sorted({k for d in parts for k in d}, key=lambda k: -parts[-1].get(k, 0.0))
        tpot = [s.seconds / cx.layout.tokens_per_step for s, (_, cx, _) in zip(steps, columns)]
        print(f"batch {b}/rank: step " + " | ".join(f"{s.seconds * 1e3:.2f}" for s in steps)
              + " ms; TPOT " + " | ".join(f"{t * 1e3:.1f}" for t in tpot) + " ms")
        for k in names:
            print(f"   {k:16s}" + "".join(f"{d.get(k, 0.0) * 1e3:9.3f}" for d in parts))


def _case_columns(ids: list[str], profile: str | None) -> tuple[str, list[tuple[str, CostContext, float]]]:
    """(label, columns) for accuracy cases: each case's model variant, decode layout and context."""
    cases = {c.id: c for c in load_cases()}
    cols, prof = [], None
    for cid in ids:
        case = cases.get(cid)
        if case is None or not (case.plan or case.method == "decode_step"):
            raise SpecError("", "--case", "the id of a case with a plan or a decode_step case in benchmarks/cases", cid)
        sc = resolve(case)
        prof = prof or load_profile(profile or sc.hw.default_profile)
        if case.plan:
            lay = (sc.plan.decode or sc.plan.aggregated)[0]
            ctx = sc.workload.isl.expected + sc.workload.osl.expected / 2
        else:  # a decode_step case: its instance at its own context per sequence
            lay, ctx = sc.instance, float(sc.context_tokens)
        cx = CostContext(sc.model, sc.hw, lay, prof, sc.workload.routing_skew if sc.workload else 0.0)
        cols.append((f"{cid} (tp{lay.tp} dp{lay.dp})", cx, ctx))
    return f"decode step under {prof.name}, each case at its mean decode context", cols


def _plan_columns(path: str, gbps: list[float] | None) -> tuple[str, list[tuple[str, CostContext, float]]]:
    """(label, columns) for a plan's first decode or aggregated layout: one column per NVLink GB/s."""
    plan = load_plan(path)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    prof, wl = load_profile(plan.profile or hw.default_profile), load_workload(plan.workload or "isl4k-osl1k")
    lay = (plan.decode or plan.aggregated)[0]
    ctx = wl.isl.expected + wl.osl.expected / 2
    hws = [dataclasses.replace(hw, scaleup_bw=g * 1e9) for g in gbps] if gbps else [hw]
    cols = [(f"{h.scaleup_bw / 1e9:g} GB/s", CostContext(model, h, lay, prof, wl.routing_skew), ctx) for h in hws]
    return f"{plan.model} {lay.tag} decode on {plan.hardware} under {prof.name}, context {ctx:,.0f}", cols


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="decode_ops.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="deepseek-v3")
    p.add_argument("--hardware", default="h200-sxm")
    p.add_argument("--workload", default="isl4k-osl1k")
    p.add_argument("--dp", type=int, default=16)
    p.add_argument("--mtp", type=int, default=1, help="draft tokens (0: no speculation)")
    p.add_argument("--acceptance", type=float, default=1.8, help="mean tokens per step under speculation")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32, 64, 128])
    p.add_argument("--profile", action="append", help="profile names (default: datasheet and the hardware's)")
    p.add_argument("--case", action="append", help="accuracy case ids to price side by side (one profile)")
    p.add_argument("--plan", help="a plan YAML: its first decode layout under its own specs")
    p.add_argument("--scaleup-gbps", type=float, nargs="+", help="with --plan: one column per NVLink GB/s (one way)")
    args = p.parse_args(argv)
    if args.scaleup_gbps and not args.plan:
        print("error: --scaleup-gbps: expected --plan with it (the bandwidths replace that plan's hardware's)",
              file=sys.stderr)
        return 2
    if args.case or args.plan:
        try:
            label, cols = (_plan_columns(args.plan, args.scaleup_gbps) if args.plan
                           else _case_columns(args.case, (args.profile or [None])[0]))
        except SpecError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        _print_table(label, cols, args.batch)
        return 0
    model, hw, wl = load_model(args.model), load_hardware(args.hardware), load_workload(args.workload)
    spec = Speculation(args.mtp, args.acceptance) if args.mtp else None
    lay = Layout(role="decode", dp=args.dp, speculation=spec)
    ctx = wl.isl.expected + wl.osl.expected / 2
    profs = [load_profile(n) for n in (args.profile or ["datasheet", hw.default_profile])]
    label = (f"{model.name} decode DEP{args.dp}{f' MTP{args.mtp}' if spec else ''} on {hw.name}, context {ctx:,.0f}")
    _print_table(label, [(pr.name, CostContext(model, hw, lay, pr, wl.routing_skew), ctx) for pr in profs], args.batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
