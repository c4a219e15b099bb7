"""DeepSeek-V3.2 decode attention per layer: the cost model's price against the op database's DSA module rows.

aiconfigurator-core's `sparse_attention/vllm/<version>/dsa_generation_module_perf` tables time one whole
`DeepseekV2MLAAttention` layer of vLLM in decode (ai-dynamo/aiconfigurator collector/vllm/collect_mla_module.py:
the fused q_a/kv_a projection and their norms, q_b, the indexer (its projections, key cache, DeepGEMM paged
MQA logits and top-k), the sparse attention kernel and o_proj, inside a CUDA graph), at a rank's head count
(`num_heads` = 128 / TP), for a KV-cache dtype (`bfloat16` or `fp8`, i.e. fp8_ds_mla) and a projection dtype
(`gemm_type`). For each accuracy case given (default: the three V3.2 GB300 mixed bars) this prices one decode
step of the case's model variant and layout (sim/cost/step.py `decode_step`, as benchmarks/decode_ops.py does)
at `batch` sequences of `context` tokens, takes the ops of that module, attn.proj + attn.core + rope + the
two latent norms of the four norm kernels a layer runs (the activation quantisation of block-FP8 inputs is
priced as one op for all of a layer's GEMMs and is left out: at most ~0.02 ms per layer here), divides by the
layers, and prints it against the table row of the case's (heads, KV dtype, projection dtype), with the
kernel the table's vLLM ran. Needs the `opdb` extra (aiconfigurator-core).

Run:  python benchmarks/investigations/dsa_module_check.py [--system gb300] [--batch 64 256 512] [--context 2048 4096]
      python benchmarks/investigations/dsa_module_check.py --case v32-gb300-mixed-tp4-fp8
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rackplan.accuracy.cases import load_cases, resolve  # noqa: E402
from rackplan.calibration.opdb import data_root, version_key  # noqa: E402
from rackplan.sim.cost.step import CostContext, decode_step  # noqa: E402
from rackplan.specs import SpecError, load_profile  # noqa: E402
from rackplan.specs.reading import read_parquet  # noqa: E402

TABLE = "dsa_generation_module_perf"
COLUMNS = ("kernel_source", "model", "kv_cache_dtype", "gemm_type", "num_heads", "batch_size", "step", "latency")
MODEL = "deepseek-ai/DeepSeek-V3.2"
CASES = ("v32-gb300-mixed-tp2", "v32-gb300-mixed-tp4-fp4", "v32-gb300-mixed-tp4-fp8")
# the table's gemm_type of a model's attention weight dtype, and its kv_cache_dtype of a KV-cache dtype
GEMM_TYPE = {"bf16": "bfloat16", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
KV_TYPE = {"bf16": "bfloat16", "fp8": "fp8"}
MODULE_OPS = ("attn.proj", "attn.core", "rope")


def table_rows(system: str, version: str | None = None, root: str | None = None) -> tuple[str, dict]:
    """(version, {(kv dtype, gemm type, heads, batch, context): (seconds, kernel)}) of the system's newest
    vLLM DSA generation-module table (or `version`), DeepSeek-V3.2 rows."""
    base = data_root(root) / system / "sparse_attention" / "vllm"
    versions = sorted((p.name for p in base.glob("*") if (p / f"{TABLE}.parquet").is_file()), key=version_key)
    if not versions or (version is not None and version not in versions):
        raise SpecError("--system", TABLE, f"a vLLM table for {system}" + (f" at {version}" if version else ""),
                        ", ".join(versions) or "none")
    ver = version or versions[-1]
    data = read_parquet(base / ver / f"{TABLE}.parquet", COLUMNS)
    c = {k: data.column(k).to_numpy(zero_copy_only=False) for k in COLUMNS}
    rows = {}
    for i in np.flatnonzero(c["model"] == MODEL):
        key = (str(c["kv_cache_dtype"][i]), str(c["gemm_type"][i]), int(c["num_heads"][i]),
               int(c["batch_size"][i]), int(c["step"][i]))
        rows[key] = (float(c["latency"][i]) * 1e-3, str(c["kernel_source"][i]))
    return ver, rows


def module_seconds(cx: CostContext, batch: int, context: int) -> float:
    """Seconds per layer of the ops the DSA module row times, priced in one decode step."""
    d = decode_step(cx, batch, batch * context).breakdown()
    latent = (cx.model.attention.q_lora_rank is not None) + (cx.model.attention.kv_lora_rank is not None)
    norms = d.get("norm", 0.0) * latent / (2 + latent)  # the layer's 2 + latent norm kernels, latent in the module
    return (sum(d.get(k, 0.0) for k in MODULE_OPS) + norms) / cx.model.num_layers


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dsa_module_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--system", help="op database system (default: the one the cases' profile was fitted on)")
    p.add_argument("--version", help="vLLM version of the table (default: the newest)")
    p.add_argument("--op-database-root", help="the database folder (default: aiconfigurator-core's systems/data)")
    p.add_argument("--case", action="append", help=f"accuracy case id, repeatable (default: {', '.join(CASES)})")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 64, 128, 256, 512, 1024])
    p.add_argument("--context", type=int, nargs="+", default=[2048, 4096],
                   help="tokens per sequence (the table's step)")
    args = p.parse_args(argv)
    try:
        cases = {c.id: c for c in load_cases()}
        priced = []  # (case id, scenario, layout, context of its pricing)
        for cid in args.case or CASES:
            if cid not in cases or not cases[cid].plan:
                raise SpecError("", "--case", "the id of a case with a plan in benchmarks/cases", cid)
            sc = resolve(cases[cid])
            kv = sc.model.attention.kv
            if sc.model.attention.kind != "mla" or len(kv) != 1 or not kv[0].topk or not kv[0].indexer_heads:
                raise SpecError(f"--case {cid}", "model", "a DeepSeek-V3.2 variant (MLA with one indexed top-k "
                                "component, what the table times)", sc.model.name)
            lay = (sc.plan.decode or sc.plan.aggregated)[0]
            prof = load_profile(sc.hw.default_profile)
            fitted_on = (prof.provenance or {}).get("source", {}).get("system")
            if fitted_on is None or fitted_on != (args.system or fitted_on):
                raise SpecError(f"--case {cid}", "--system", f"the system its profile {prof.name} was fitted on "
                                f"({fitted_on or 'none: not an op-database profile'})", args.system)
            args.system = fitted_on
            priced.append((cid, sc, lay, CostContext(sc.model, sc.hw, lay, prof, sc.workload.routing_skew)))
        ver, rows = table_rows(args.system, args.version, args.op_database_root)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"DeepSeek-V3.2 decode attention, one layer: {args.system} vLLM {ver} {TABLE} (measured) vs the case's "
          "price (attn.proj + attn.core + rope + latent norms): measured / priced ms (priced / measured)")
    for cid, sc, lay, cx in priced:
        heads = sc.model.attention.num_heads // lay.tp
        kv, gemm = KV_TYPE.get(sc.model.dtypes.kv_cache), GEMM_TYPE.get(sc.model.dtypes.attention_weights)
        kernels = sorted({k for key, (_, k) in rows.items() if key[:3] == (kv, gemm, heads)})
        print(f"{cid} (tp{lay.tp}: {heads} heads, KV {kv}, projections {gemm}; table kernel "
              f"{', '.join(kernels) or 'none'}; {cx.prof.name})")
        ratios = []
        for ctx in args.context:
            cells = []
            for b in args.batch:
                got = module_seconds(cx, b, ctx)
                want = rows.get((kv, gemm, heads, b, ctx))
                if want is None:
                    cells.append(f"b{b} -/{got * 1e3:.3f}")
                    continue
                ratios.append(got / want[0])
                cells.append(f"b{b} {want[0] * 1e3:.3f}/{got * 1e3:.3f} ({got / want[0]:.2f})")
            print(f"  context {ctx:>6}: " + "  ".join(cells))
        if ratios:
            print(f"  geo-mean priced / measured {float(np.exp(np.mean(np.log(ratios)))):.2f} "
                  f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
