"""The latency-first plan (configs/plans/v41-flash-gb300-single-user.yaml) against a first-principles
bound: tokens/s of one user, simulated, beside what the HBM bandwidth of its GPUs allows.

Bound: a decode step must read every weight its tokens touch at least once. Without speculation a
token reads the active bytes of one token (dense weights + its top-k routed experts per layer +
its KV); with DSpark a step verifies 1 + d tokens (the dense weights once, the distinct experts
those tokens pick, the drafter's share) and emits the acceptance length. Dividing by the aggregate
HBM bandwidth of the instance (GPUs x datasheet TB/s) gives the least time per token; any
communication, kernel tail or host time only adds to it.

Run:  python benchmarks/single_user.py [--plan P] [--requests 16] [--profile datasheet --profile default]
      [--model deepseek-v4-flash --no-speculation]  (the plan's layout with another model, without speculation)
"""
from __future__ import annotations

import argparse
import dataclasses

from rackplan.sim.cost.moe import expert_bytes, hit_probability
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.sim.simulator import simulate
from rackplan.specs import DTYPE_BYTES, load_hardware, load_model, load_plan, load_profile, load_workload


def step_bytes(model, lay, tokens: float, ctx: float) -> dict[str, float]:
    """Bytes the whole instance must read for one decode step of `tokens` tokens of one sequence."""
    n, dt = model.param_counts(), model.dtypes
    dense = (n["attention"] * DTYPE_BYTES[dt.attention_weights]
             + (n["dense_ffn"] + n["shared_experts"]) * DTYPE_BYTES[dt.dense_weights]
             + n["router"] * 4.0 + n["embed_head"] / 2 * 2.0)  # fp32 router; BF16 LM head (the embedding is a lookup)
    hit = model.moe.num_experts * hit_probability(model, tokens)  # distinct experts the tokens pick, per layer
    routed = hit * expert_bytes(model) * model.num_moe_layers
    kv = ctx * model.kv_bytes_per_token + model.kv_bytes_per_sequence_fixed
    out = {"dense weights": dense, "routed experts": routed, "KV cache": kv}
    d = model.draft
    if lay.speculation is not None and d is not None and d.num_experts:
        rows = lay.speculation.num_tokens if d.kind == "draft_model" else 1
        d_hit = d.num_experts * (1 - (1 - d.top_k / d.num_experts) ** rows)
        out["drafter"] = d.stages * (d.dense_active_params + d_hit * d.expert_params) * DTYPE_BYTES[d.weight_dtype]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="single_user.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", default="v41-flash-gb300-single-user")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--profile", action="append", help="profile name, or 'default' (the hardware's)")
    p.add_argument("--model", help="price the plan's layout with this model instead of the plan's")
    p.add_argument("--no-speculation", action="store_true", help="the plan's layout without speculation")
    args = p.parse_args(argv)
    plan = load_plan(args.plan)
    if args.no_speculation:
        plan = dataclasses.replace(plan, aggregated=tuple(dataclasses.replace(a, speculation=None)
                                                          for a in plan.aggregated))
    if args.model:
        plan = dataclasses.replace(plan, model=args.model)
    model, hw, wl = load_model(plan.model), load_hardware(plan.hardware), load_workload(plan.workload)
    lay = plan.aggregated[0]
    ctx = wl.isl.expected + wl.osl.expected / 2  # a decode step's mean context
    bw = lay.gpus * hw.hbm_bw
    one = step_bytes(model, dataclasses.replace(lay, speculation=None), 1.0, ctx)
    spec = step_bytes(model, lay, float(lay.queries_per_step), ctx) if lay.speculation else one
    accepted = lay.tokens_per_step
    print(f"{plan.name}: {lay.tag} on {lay.gpus} x {hw.name} ({bw / 1e12:.0f} TB/s together), context ~{ctx:,.0f}")
    print("bytes per step (GB):", ", ".join(f"{k} {v / 1e9:.2f}" for k, v in spec.items()),
          f"-> {sum(spec.values()) / 1e9:.2f} for {lay.queries_per_step} "
          f"tokens verified, {accepted} emitted")
    bound_plain = bw / sum(one.values())
    bound_spec = accepted * bw / sum(spec.values())
    print(f"bound without speculation: {bound_plain:,.0f} tok/s (active bytes {sum(one.values()) / 1e9:.2f} GB "
          f"per token); with DSpark at acceptance {accepted}: {bound_spec:,.0f} tok/s")
    for label in args.profile or ["datasheet", "default"]:
        prof = load_profile(hw.default_profile if label == "default" else label)
        res = simulate(plan, wl, prof, args.requests, 0)
        step = decode_step(CostContext(model, hw, lay, prof, wl.routing_skew), 1.0, ctx)
        top = sorted(step.breakdown().items(), key=lambda kv: -kv[1])[:6]
        print(f"{prof.name:>20}: simulated {res.metrics['tps_per_user']:,.0f} tok/s/user "
              f"({res.metrics['tps_per_user'] / bound_spec:.2f} of the bound); one step {step.seconds * 1e3:.2f} ms: "
              + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
