"""A V4-Flash TP4 decode step at batch 1 on GB300, op by op: what each op must read from HBM, what
rackplan prices (measured and datasheet profiles), and what the public per-op tables time for the same
op at the same shape under CUDA-graph replay (aiconfigurator-core's gb300 tables: SGLang 0.5.14 and
vLLM 0.24.0), per layer; then the step and what a published TPOT implies about speculation.

Issue 35's mechanism 2 (batch-1 floors): the question is which per-op price is wrong. Every table row
read here was timed by replaying a CUDA graph (the collectors' benchmark_with_power; the DSV4 attention
collector replays `layer.self_attn(...)` of a one-layer model at TP-sharded shapes, its all-reduce cut
short; custom_allreduce_perf's `*_graph` backends), so they carry no eager launch gaps.

Run:  python benchmarks/batch1_ops.py [--context 4096] [--tpot-ms 4.19 --spec-tokens 3]
      (needs the opdb extra for the table columns; without it prints rackplan's side only)
"""
from __future__ import annotations

import argparse
import dataclasses

from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import load_hardware, load_model, load_plan, load_profile
from rackplan.specs.layout import Speculation

MODEL, HARDWARE, PLAN = "deepseek-v4-flash", "gb300-nvl72", "v41-flash-gb300-single-user"
SYSTEM = "gb300"
TABLES = {"sglang": "0.5.14", "vllm": "0.24.0"}  # the newest holding every table read below
# rackplan op name -> the row of this table it is compared with (a row of several ops where the tables time
# them together: the DSV4 attention module is projections + latent norms + RoPE + cache write + compressor +
# indexer + FlashMLA in one graph)
ROWS = (("attention module", ("attn.proj", "attn.core", "rope")),
        ("routed experts + routing", ("moe.experts", "moe.route")),
        ("shared expert", ("shared_expert",)),
        ("router GEMM", ("router",)),
        ("mHC (2 sites)", ("mhc",)),
        ("TP all-reduce x 2", ("attn.allreduce", "ffn.allreduce")),
        ("RMSNorms", ("norm",)),
        ("activation quantisation", ("quantize",)))


def layer_bytes(step, names: tuple[str, ...], layers: int) -> float:
    """HBM bytes per layer of the ops `names` in a priced step (weights and activations as the ops count them)."""
    return sum(op.bytes for op in step.ops if op.name in names) / layers


def layer_seconds(step, names: tuple[str, ...], layers: int) -> float:
    """Seconds per layer of the ops `names` in a priced step."""
    return sum(op.seconds for op in step.ops if op.name in names) / layers


def _rows(framework: str, table: str, op: str):
    """Rows of one public table as a pandas frame, or None when the package or the table is absent."""
    try:
        from rackplan.calibration.opdb import data_root
        from rackplan.specs import SpecError
        from rackplan.specs.reading import read_parquet
    except ImportError:
        return None
    try:
        path = data_root() / SYSTEM / op / framework / TABLES[framework] / f"{table}.parquet"
        return read_parquet(path, ("latency",)).to_pandas() if path.is_file() else None
    except SpecError:
        return None


def table_us(framework: str, model, tp: int, ctx: int) -> dict[str, float]:
    """Microseconds per layer each table times for the rows of ROWS, at one token, V4-Flash's shapes at `tp`."""
    h, inter, e, k = model.hidden_size, model.moe.expert_intermediate, model.moe.num_experts, model.moe.top_k
    out: dict[str, float] = {}
    att = []
    for kind in ("csa", "hca"):
        df = _rows(framework, f"dsv4_{kind}_generation_module_perf", "sparse_attention")
        if df is None:
            return out
        sel = df[(df.batch_size == 1) & (df.tp_size == tp) & (df.gemm_type == "fp8_block") & (df.step == ctx)
                 & df.model.str.contains("Flash")]
        if sel.empty:
            return out
        att.append(float(sel.latency.min()) * 1e3)
    csa_layers = next(c.layers for c in model.attention.kv if c.name == "csa")
    # the two sliding-window-only layers have no table of their own: priced as an HCA layer (the cheaper module)
    out["attention module"] = (att[0] * csa_layers + att[1] * (model.num_layers - csa_layers)) / model.num_layers
    out["csa"], out["hca"] = att
    moe = _rows(framework, "moe_perf", "moe")
    if moe is not None:
        sel = moe[(moe.num_tokens == 1) & (moe.hidden_size == h) & (moe.inter_size == inter) & (moe.num_experts == e)
                  & (moe.topk == k) & (moe.moe_tp_size == tp) & (moe.moe_ep_size == 1)
                  & (moe.distribution == "balanced") & moe.moe_dtype.str.contains("mxfp4")]
        if not sel.empty:
            out["routed experts + routing"] = float(sel.latency.min()) * 1e3
    gemm = _rows(framework, "gemm_perf", "gemm")
    if gemm is not None:
        one = gemm[gemm.m == 1]

        def g(dtype, n, kk):
            s = one[(one.gemm_dtype == dtype) & (one.n == n) & (one.k == kk)]
            return float(s.latency.min()) * 1e3 if not s.empty else None
        shared = inter * model.moe.num_shared_experts // tp
        up, down = g("fp8_block", 2 * shared, h), g("fp8_block", h, shared)
        if up is not None and down is not None and up < 100 and down < 100:  # vLLM's fp8_block rows are eager (>250 us)
            out["shared expert"] = up + down
        r = g("bfloat16", e, h)
        if r is not None:
            out["router GEMM"] = r
    mhc = _rows(framework, "mhc_module_perf", "mhc")
    if mhc is not None:
        sel = mhc[(mhc.num_tokens == 1) & (mhc.hidden_size == h) & (mhc.hc_mult == model.hc_mult)]
        if not sel.empty:
            out["mHC (2 sites)"] = sum(float(sel[sel.op_name == o].latency.min()) * 1e3 for o in ("pre", "post"))
    ar = _rows(framework, "custom_allreduce_perf", "comm")
    if ar is not None:
        nbytes = h * model.dtypes.activation_bytes  # one token's hidden state
        sel = ar[(ar.num_gpus == tp) & (ar.message_size == nbytes) & ar.backend.str.endswith("graph")]
        if not sel.empty:
            out["TP all-reduce x 2"] = 2 * float(sel.latency.min()) * 1e3
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="batch1_ops.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--context", type=int, default=4096, help="KV tokens of the one sequence (a table row: 4096)")
    p.add_argument("--tpot-ms", type=float, default=4.19, help="a published TPOT to read an acceptance length from")
    p.add_argument("--spec-tokens", type=int, default=3, help="draft tokens of the run that published it (MTP 3-1-4)")
    args = p.parse_args(argv)
    model, hw = load_model(MODEL), load_hardware(HARDWARE)
    lay = dataclasses.replace(load_plan(PLAN).aggregated[0], ep=1, speculation=None)  # TP4, experts TP-sharded
    layers = model.num_layers
    profs = [load_profile(hw.default_profile), load_profile("datasheet")]
    steps = [decode_step(CostContext(model, hw, lay, prof, 0.0), 1.0, float(args.context)) for prof in profs]
    tables = {fw: table_us(fw, model, lay.tp, args.context) for fw in TABLES}
    print(f"{MODEL} {lay.tag} on {hw.name}, one sequence, context {args.context:,}: microseconds per layer "
          f"({layers} layers); HBM floor = bytes / {hw.hbm_bw / 1e12:.0f} TB/s")
    head = f"{'op':<26}{'MB/rank':>9}{'HBM floor':>10}" + "".join(f"{p.name:>18}" for p in profs) + \
        "".join(f"{fw + ' table':>14}" for fw in TABLES)
    print(head)
    total = [0.0] * len(profs)
    for label, names in ROWS:
        nbytes = layer_bytes(steps[0], names, layers)
        us = [layer_seconds(s, names, layers) * 1e6 for s in steps]
        total = [a + b for a, b in zip(total, us)]
        cells = "".join(f"{tables[fw].get(label, float('nan')):>14.1f}" for fw in TABLES)
        print(f"{label:<26}{nbytes / 1e6:>9.2f}{nbytes / hw.hbm_bw * 1e6:>10.1f}" + "".join(f"{u:>18.1f}" for u in us)
              + cells)
    sums = "".join(f"{sum(tables[fw].get(label, 0.0) for label, _ in ROWS):>14.1f}" for fw in TABLES)
    print(f"{'sum of the rows above (a table: its rows)':<45}" + "".join(f"{t:>18.1f}" for t in total) + sums)
    for fw in TABLES:
        if "csa" in tables[fw]:
            print(f"  {fw} attention module at TP{lay.tp}, batch 1: CSA {tables[fw]['csa']:.1f} us, HCA "
                  f"{tables[fw]['hca']:.1f} us a layer")
    for prof, s in zip(profs, steps):
        print(f"{prof.name}: step {s.seconds * 1e3:.2f} ms (LM head, sampler and host included)")
    spec = dataclasses.replace(lay, speculation=Speculation(args.spec_tokens, 1.0))
    for prof, plain in zip(profs, steps):
        s = decode_step(CostContext(model, hw, spec, prof, 0.0), 1.0, float(args.context))
        draft = s.breakdown().get("draft", 0.0)
        print(f"{prof.name}: with MTP {args.spec_tokens} ({args.spec_tokens + 1} tokens verified) a step is "
              f"{s.seconds * 1e3:.2f} ms (drafter {draft * 1e3:.2f}); a published TPOT of {args.tpot_ms} ms implies "
              f"an acceptance length of {s.seconds * 1e3 / args.tpot_ms:.2f}")
        # an MTP pass is one decoder layer of the target's kind and the shared LM head (DeepSeek-V3 report, 2.2):
        # what one layer of the plain step and its LM head cost, beside what the drafter prices a pass at
        layer = sum(layer_seconds(plain, names, layers) for _, names in ROWS)
        head = plain.breakdown().get("lm_head", 0.0)
        print(f"  one MTP pass as priced {draft / args.spec_tokens * 1e6:.0f} us; one target layer at one token + "
              f"the LM head {(layer + head) * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
