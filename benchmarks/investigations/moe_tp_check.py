"""Routed experts under tensor parallelism: the cost model's price against the op database's MoE-TP rows.

A TP instance without expert parallelism shards every expert's intermediate width over its ranks
(DeepSeek-V3/V3.2: 2,048 -> 512 per rank at TP4). The op database fits its experts curves on
`moe_tp_size 1` rows only (calibration/opdb.md); this script checks the TP shapes it did not fit
on. For each `moe_tp_size` row of the system's vLLM `moe_perf` table at the DeepSeek shape
(hidden 7168, inter 2048, top-8 of 256; or --model's, e.g. Qwen3-235B's hidden 4096, inter 1536, top-8 of
128; balanced routing, no EP) it prices the same layer as the
simulator does (sim/cost/step.py `StepModel._price_moe`: moe.experts + moe.route, one MoE layer,
every token entering the rank) with the system's measured profile, and prints measured, priced and
their ratio. Needs the `opdb` extra (aiconfigurator-core).

Run:  python benchmarks/investigations/moe_tp_check.py [--system gb300] [--hardware gb300-nvl72] [--tokens 64 512 2048]
      [--model qwen3-235b-a22b --dtype bfloat16 fp8]  (another model's MoE shape, where the table has it)
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from rackplan.calibration.opdb import data_root, locate, most_rows, read
from rackplan.sim.cost.step import CostContext
from rackplan.specs import SpecError, load_hardware, load_model, load_profile
from rackplan.specs.layout import Layout

# the op database's MoE dtype -> (expert weights, expert compute) of the model variant priced
DTYPES = {"fp8_block": ("fp8_block", "fp8_block"), "nvfp4": ("nvfp4", "fp4"), "bfloat16": ("bf16", "bf16"),
          "fp8": ("fp8", "fp8")}


def shape(model_name: str) -> dict[str, int]:
    """The moe_perf columns that select a model's MoE layer shape (no EP)."""
    m = load_model(model_name)
    return {"hidden_size": m.hidden_size, "inter_size": m.moe.expert_intermediate, "topk": m.moe.top_k,
            "num_experts": m.moe.num_experts, "moe_ep_size": 1}


def table_rows(system: str, dtype: str, model_name: str = "deepseek-v3") -> dict[tuple[int, int], float]:
    """{(moe_tp_size, num_tokens): seconds} of the system's vLLM moe_perf rows at the model's MoE shape."""
    c = read(locate(data_root(), system, "vllm")["moe_perf"])
    sel = (c["distribution"] == "balanced") & (c["moe_dtype"] == dtype)
    for key, val in shape(model_name).items():
        sel &= c[key] == val
    if not sel.any():
        raise SpecError("--dtype", "moe_dtype", f"a dtype with rows at {model_name}'s MoE shape on {system}", dtype)
    sel &= c["kernel_source"] == most_rows(c["kernel_source"][sel])
    return {(int(t), int(n)): float(s) for t, n, s in zip(c["moe_tp_size"][sel], c["num_tokens"][sel],
                                                          c["seconds"][sel])}


def priced(hw_name: str, dtype: str, moe_tp: int, tokens: int, model_name: str = "deepseek-v3") -> float:
    """Seconds of one MoE layer (experts + routing) on a TP`moe_tp` rank, as the simulator prices it."""
    hw = load_hardware(hw_name)
    base = load_model(model_name)
    weights, compute = DTYPES[dtype]
    model = dataclasses.replace(base, dtypes=dataclasses.replace(base.dtypes, expert_weights=weights,
                                                                 expert_compute=compute))
    lay = Layout(role="both", dp=1, tp=moe_tp, expert_parallel=False)
    sm = CostContext(model, hw, lay, load_profile(hw.default_profile)).step_model
    t_exp, t_route = sm._price_moe(float(tokens), float(tokens), 1, "low_latency", "decode", 0.0)[1:3]
    return t_exp + t_route


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="moe_tp_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--system", default="gb300", help="op database system")
    p.add_argument("--hardware", default="gb300-nvl72", help="rackplan hardware (its default profile prices)")
    p.add_argument("--dtype", nargs="+", default=["nvfp4", "fp8_block"], choices=sorted(DTYPES))
    p.add_argument("--tokens", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 8192])
    p.add_argument("--moe-tp", type=int, nargs="+", default=[1, 2, 4, 8], help="moe_tp_size rows to check")
    p.add_argument("--model", default="deepseek-v3", help="model whose MoE shape is checked (e.g. qwen3-235b-a22b)")
    args = p.parse_args(argv)
    try:
        tables = {dt: table_rows(args.system, dt, args.model) for dt in args.dtype}
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"one MoE layer ({args.model}'s shape, balanced, no EP), {args.system} vLLM moe_perf vs "
          f"{load_hardware(args.hardware).default_profile}: measured / priced ms (priced / measured)")
    for dt, rows in tables.items():
        tps = [t for t in sorted({t for t, _ in rows}) if t in args.moe_tp]
        print(f"{dt}: tokens " + "".join(f"{'moe_tp ' + str(t):>24}" for t in tps))
        ratios = {t: [] for t in tps}
        for n in args.tokens:
            cells = []
            for t in tps:
                if (t, n) not in rows:
                    cells.append(f"{'-':>24}")
                    continue
                got, want = priced(args.hardware, dt, t, n, args.model), rows[(t, n)]
                ratios[t].append(got / want)
                cells.append(f"{want * 1e3:>10.3f} / {got * 1e3:.3f} ({got / want:.2f})")
            print(f"{'':>4}{n:>7} " + "".join(cells))
        print("    geo-mean priced / measured: " + ", ".join(
            f"moe_tp {t}: {float(np.exp(np.mean(np.log(r)))):.2f}" for t, r in ratios.items() if r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
