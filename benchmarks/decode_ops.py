"""One decode step of a plan's decode layout, op by op, under two profiles side by side.

Prices `decode_step` (sim/cost/step.py, the planner's and the simulator's pricing) at several
sequences per DP rank, every rank alike, at the workload's mean decode context, and prints each
op's milliseconds per profile, the step, and the TPOT it implies (step / acceptance length under
speculation). Default: the README's H200 case (DeepSeek-V3, decode DEP16 with MTP 1 on h200-sxm).

Run:  python benchmarks/decode_ops.py [--dp 16] [--mtp 1] [--batch 1 8 32 64 128]
"""
from __future__ import annotations

import argparse

from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import load_hardware, load_model, load_profile, load_workload
from rackplan.specs.layout import Layout, Speculation


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
    args = p.parse_args(argv)
    model, hw, wl = load_model(args.model), load_hardware(args.hardware), load_workload(args.workload)
    spec = Speculation(args.mtp, args.acceptance) if args.mtp else None
    lay = Layout(role="decode", dp=args.dp, speculation=spec)
    ctx = wl.isl.expected + wl.osl.expected / 2
    profs = [load_profile(n) for n in (args.profile or ["datasheet", hw.default_profile])]
    accept = lay.tokens_per_step
    print(f"{model.name} decode DEP{args.dp}{f' MTP{args.mtp}' if spec else ''} on {hw.name}, context {ctx:,.0f}; "
          "ms per step: " + " | ".join(pr.name for pr in profs))
    for b in args.batch:
        steps = [decode_step(CostContext(model, hw, lay, pr, wl.routing_skew), b, b * ctx) for pr in profs]
        parts = [s.breakdown() for s in steps]
        names = sorted({k for d in parts for k in d}, key=lambda k: -parts[-1].get(k, 0.0))
        print(f"batch {b}/rank: step " + " | ".join(f"{s.seconds * 1e3:.2f}" for s in steps)
              + " ms; TPOT " + " | ".join(f"{s.seconds / accept * 1e3:.1f}" for s in steps) + " ms")
        for k in names:
            print(f"   {k:16s}" + "".join(f"{d.get(k, 0.0) * 1e3:9.3f}" for d in parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
