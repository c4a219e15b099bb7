"""Why a TP2 prefill step is priced closer to an EP2 step than vLLM runs it (DeepSeek-R1 NVFP4 on 2 x GB300).

The vLLM GB300 post (benchmarks/cases/vllm-gb300-deepseek.yaml) publishes R1 prefill on the same two GPUs as
TP2 (one engine, 32,768-token steps) and as DP2 + EP2 (two engines, 8,192-token steps each); the model
over-predicts TP2's plateau by 1.18x and EP2's by 1.04x. Two views of that gap:

1. `--step` (default): one full prefill step of each case (2,048-token prompts filling the step budget),
   op by op, in GPU-milliseconds per 1,000 prompt tokens (step seconds x GPUs / tokens): the ops TP prices
   once per rank on every token (norms, q_a / kv_a, router, the all-reduces) against the EP step's
   dispatch and combine, and what the TP step costs beyond the EP step per op.
2. `--module`: the MLA attention layer in prefill (attn.proj + attn.core + rope + the latent norms per layer:
   the q_a / kv_a projections and norms every TP rank runs on all tokens, the head-sharded q_b / kv_b / o and
   the attention over the rank's 128 / TP heads) against vLLM's own measured layer, aiconfigurator-core's
   `mla/vllm/<version>/mla_context_module_perf` (ai-dynamo/aiconfigurator collector/vllm/collect_mla_module.py
   times `DeepseekV2MLAAttention.forward` at `num_heads` heads, BF16 projections and cache), at 2,048-token
   prompts, batch x heads; then the table's and the model's ratio of the TP2 rank's layer (64 heads,
   16 prompts) to the EP2 rank's (128 heads, 4 prompts): 4 x the tokens at half the heads each. Needs the
   `opdb` extra (aiconfigurator-core).

Run:  python benchmarks/investigations/tp_prefill_check.py [--step] [--module] [--case r1-b300-prefill-tp2]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rackplan.accuracy.cases import load_cases, resolve  # noqa: E402
from rackplan.calibration.opdb import data_root, version_key  # noqa: E402
from rackplan.sim.cost.step import CostContext, prefill_step  # noqa: E402
from rackplan.specs import SpecError, load_profile  # noqa: E402
from rackplan.specs.reading import read_parquet  # noqa: E402

TP_CASE, EP_CASE = "r1-gb300-tp2-prefill-c256", "r1-gb300-prefill-ep2"
ISL = 2048  # the post's prompt length
TABLE = "mla_context_module_perf"
COLUMNS = ("kernel_source", "model", "kv_cache_dtype", "gemm_type", "num_heads", "batch_size", "isl", "latency")
MODULE_OPS = ("attn.proj", "attn.core", "rope")


def _context(case_id: str) -> tuple[CostContext, int]:
    """(cost context of the case's layout under its hardware's default profile, prompts in one full step)."""
    case = {c.id: c for c in load_cases()}.get(case_id)
    if case is None or not case.plan:
        raise SpecError("", "case", "an accuracy case with a plan", case_id)
    sc = resolve(case)
    lay = sc.plan.aggregated[0]
    prompts = int(lay.max_tokens_per_step // ISL)
    return CostContext(sc.model, sc.hw, lay, load_profile(sc.hw.default_profile), sc.workload.routing_skew), prompts


def step_table() -> None:
    """Part 1: both steps op by op in GPU-ms per 1,000 prompt tokens."""
    cols = []
    for cid in (TP_CASE, EP_CASE):
        cx, prompts = _context(cid)
        lay = cx.layout
        s = prefill_step(cx, [ISL] * prompts)
        gpus, tokens = lay.dp * lay.tp, prompts * ISL * lay.dp
        per = {k: v * gpus / tokens * 1e6 for k, v in s.breakdown().items()}  # GPU-ms per 1k tokens
        cols.append((cid, lay, s.seconds, tokens / (s.seconds * gpus), per))
    for cid, lay, sec, tput, _ in cols:
        print(f"{cid}: tp{lay.tp} dp{lay.dp}, step {sec * 1e3:.1f} ms, {tput:,.0f} tok/s/GPU (steady, no ramp)")
    (_, _, _, _, tp), (_, _, _, _, ep) = cols
    names = sorted(set(tp) | set(ep), key=lambda k: -abs(tp.get(k, 0.0) - ep.get(k, 0.0)))
    print(f"{'GPU-ms per 1k tokens':22s}{'TP2':>9}{'EP2':>9}{'TP2 - EP2':>11}")
    for k in names:
        a, b = tp.get(k, 0.0), ep.get(k, 0.0)
        if a or b:
            print(f"  {k:20s}{a:9.3f}{b:9.3f}{a - b:11.3f}")
    print(f"  {'step':20s}{sum(tp.values()):9.3f}{sum(ep.values()):9.3f}{sum(tp.values()) - sum(ep.values()):11.3f}")


def module_rows(system: str, root: str | None = None) -> dict[str, dict[tuple[int, int], float]]:
    """{version: {(heads, batch): seconds}} of the system's vLLM MLA context-module tables: DeepSeek-V3 rows
    at ISL 2,048, BF16 projections and cache, the FLASH_ATTN backend rows (the only BF16-projection ones)."""
    base = data_root(root) / system / "mla" / "vllm"
    out = {}
    for path in sorted(base.glob(f"*/{TABLE}.parquet"), key=lambda p: version_key(p.parent.name)):
        data = read_parquet(path, COLUMNS)
        c = {k: data.column(k).to_numpy(zero_copy_only=False) for k in COLUMNS}
        sel = ((c["model"] == "deepseek-ai/DeepSeek-V3") & (c["isl"] == ISL) & (c["gemm_type"] == "bfloat16")
               & (c["kv_cache_dtype"] == "bfloat16") & (c["kernel_source"] == "FLASH_ATTN"))
        rows: dict[tuple[int, int], list[float]] = {}
        for i in np.flatnonzero(sel):
            rows.setdefault((int(c["num_heads"][i]), int(c["batch_size"][i])), []).append(float(c["latency"][i]))
        out[path.parent.name] = {k: float(np.mean(v)) * 1e-3 for k, v in rows.items()}
    if not out:
        raise SpecError("--system", TABLE, f"a vLLM table for {system}", "none")
    return out


def module_seconds(cx: CostContext, heads: int, prompts: int) -> tuple[float, float]:
    """(the layer's attn.proj + attn.core + rope + its latent norms, its attn.core alone) in seconds per layer,
    priced for a TP rank of 128 / heads at `prompts` prompts of ISL tokens. The norm op prices a layer's norms
    as one stream (elementwise.norm_bytes); the q_a / kv_a norms the module runs take their share of its bytes."""
    m = cx.model
    lay = dataclasses.replace(cx.layout, tp=m.attention.num_heads // heads, dp=1)
    b = prefill_step(CostContext(m, cx.hw, lay, cx.prof), [ISL] * prompts).breakdown()
    latent = 2.0 * ((m.attention.q_lora_rank or 0) + (m.attention.kv_lora_rank or 0))
    norms = b.get("norm", 0.0) * latent / (8.0 * m.hidden_size + latent)  # (norm_bytes' two terms)
    return (sum(b.get(k, 0.0) for k in MODULE_OPS) + norms) / m.num_layers, b.get("attn.core", 0.0) / m.num_layers


def module_table(system: str | None, case_id: str, root: str | None = None) -> None:
    """Part 2: the attention layer, measured (each table version) against priced, and the TP2 / EP2 ratio, under
    the profile of `case_id`'s hardware (its op-database system unless `system` is given)."""
    cx, _ = _context(case_id)
    system = system or (cx.prof.provenance or {}).get("source", {}).get("system")
    if system is None:
        raise SpecError("--system", "system", f"an op-database system ({cx.prof.name} names none)", "none")
    tables = module_rows(system, root)
    print(f"MLA prefill attention layer, ISL {ISL}, BF16: {system} vLLM {TABLE} ms (versions "
          f"{', '.join(tables)}) / priced ms ({cx.prof.name}; attn.core of it)")
    for heads in (128, 64, 32, 16):
        for b in (1, 4, 16, 64):
            got, core = module_seconds(cx, heads, b)
            meas = "  ".join(f"{t[(heads, b)] * 1e3:7.3f} ({got / t[(heads, b)]:.2f})" if (heads, b) in t
                             else f"{'-':>7}       " for t in tables.values())
            print(f"  {heads:3d} heads x {b:2d} prompts: {meas}  priced {got * 1e3:7.3f} (core {core * 1e3:.3f})")
    tp, _ = module_seconds(cx, 64, 16)
    ep, _ = module_seconds(cx, 128, 4)
    ratios = "  ".join(f"vLLM {v} {t[(64, 16)] / t[(128, 4)]:.2f}" for v, t in tables.items()
                       if (64, 16) in t and (128, 4) in t)
    print(f"TP2 rank's layer / EP2 rank's (64 heads x 16 prompts / 128 heads x 4): {ratios}  priced {tp / ep:.2f} "
          "(4 x the tokens at half the heads: 2.00 if all of it were head-sharded)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tp_prefill_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--step", action="store_true", help="part 1: the two steps op by op (default: both parts)")
    p.add_argument("--module", action="store_true", help="part 2: the attention layer against vLLM's table")
    p.add_argument("--system", help="op database system of part 2 (default: the one --case's profile was fitted on)")
    p.add_argument("--case", default=TP_CASE, help=f"part 2: the case whose model, hardware and profile price the "
                   f"layer (default {TP_CASE}; e.g. r1-b300-prefill-tp2, r1-h200-prefill-tp8)")
    p.add_argument("--op-database-root", help="the database folder (default: aiconfigurator-core's systems/data)")
    args = p.parse_args(argv)
    both = not (args.step or args.module)
    try:
        if args.step or both:
            step_table()
        if args.module or both:
            module_table(args.system, args.case, args.op_database_root)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
