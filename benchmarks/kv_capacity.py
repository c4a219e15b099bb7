"""KV room of an accuracy case's instance, from sim/cost/memory.py: weights per GPU, the reserve,
KV tokens per rank and the sequences of the case's ISL + OSL that fit, at the engine's default fraction
(sim/cost/memory.py memory_fraction: vLLM's 0.9) and at a `--gpu-memory-utilization` fraction. With `--simulate`
the case also runs under each fraction (the real simulator, the hardware's default profile) and
prints predicted / published, for checking whether memory bounds a case. For a plan, `rackplan explain
--plan P` prints each pool's KV room (the same sim/cost/memory.py functions); this script stays for the
accuracy cases and their memory-fraction variants.

MLA latents and indexer keys are replicated on every TP rank (the rank holds all of them), so
TP divides the weights, not the KV per token. `--latent-bytes B` replaces the entry bytes of the
model's first KV component (e.g. 1152 for a BF16 MLA latent instead of 656 fp8_ds_mla).

Run:  python benchmarks/kv_capacity.py --case v32-gb300-mixed [--gpu-memory-utilization 0.9] [--simulate]
"""
from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rackplan.accuracy.cases import load_cases, resolve  # noqa: E402
from rackplan.accuracy.predict import predict  # noqa: E402
from rackplan.sim.cost.memory import kv_capacity_tokens, reserve_bytes, weight_bytes_per_rank  # noqa: E402
from rackplan.specs import SpecError, load_hardware, load_profile  # noqa: E402


def variant(case, gmu: float | None, latent_bytes: int | None):
    """`case` with every aggregated instance at `gmu` and the first KV component at `latent_bytes`."""
    plan = copy.deepcopy(case.plan)
    for lay in plan.get("aggregated", []):
        if gmu is not None:
            lay["gpu_memory_utilization"] = gmu
    over = copy.deepcopy(case.model_overrides or {})
    if latent_bytes is not None:
        model = resolve(case).model
        kv = over.setdefault("attention", {}).setdefault("kv", [])
        first = model.attention.kv[0].name
        item = next((k for k in kv if k.get("name") == first), None)
        if item is None:
            item = {"name": first}
            kv.append(item)
        item["entry_bytes"] = latent_bytes
    return replace(case, plan=plan, model_overrides=over)


def row(case, gmu: float | None, latent_bytes: int | None, simulate: bool) -> dict:
    """Memory figures of the case's first aggregated instance (and its prediction with `simulate`)."""
    c = variant(case, gmu, latent_bytes)
    sc = resolve(c)
    lay, wl = sc.plan.aggregated[0], sc.workload
    cap = kv_capacity_tokens(sc.model, sc.hw, lay)
    seq = wl.isl.value + wl.osl.value if wl.isl.kind == wl.osl.kind == "fixed" else None
    out = {"case": case.id, "gmu": gmu, "kv_bytes_per_token": sc.model.kv_bytes_per_token,
           "weights_gb": sum(weight_bytes_per_rank(sc.model, lay).values()) / 1e9,
           "reserve_gb": reserve_bytes(sc.model, sc.hw, lay) / 1e9, "kv_tokens": cap,
           "sequences": cap / seq if seq else None}
    if simulate:
        prof = load_profile(load_hardware(case.hardware).default_profile)
        out["ratio"] = predict(c, prof, 0) / case.published
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kv_capacity.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", required=True, help="simulate cases whose id contains this")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.92,
                   help="fraction beside the engine's default (default 0.92: later vLLM's default, docs.vllm.ai)")
    p.add_argument("--latent-bytes", type=int, help="entry bytes of the first KV component (default: the model's)")
    p.add_argument("--simulate", action="store_true", help="also predict each case under each fraction")
    args = p.parse_args(argv)
    cases = [c for c in load_cases() if c.method == "simulate" and c.plan.get("aggregated")
             and any(s in c.id for s in args.case)]
    if not cases:
        print("error: --case: a simulate case with an aggregated plan", file=sys.stderr)
        return 2
    try:
        rows = [row(c, g, args.latent_bytes, args.simulate) for c in cases for g in (None, args.gpu_memory_utilization)]
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{'case':28} {'fraction':>8} {'KV B/token':>10} {'weights GB':>10} {'reserve GB':>10} {'KV tokens':>11} "
          f"{'sequences':>9}" + (f" {'pred/pub':>8}" if args.simulate else ""))
    for r in rows:
        seqs = f"{r['sequences']:9,.0f}" if r["sequences"] is not None else f"{'-':>9}"
        frac = f"{r['gmu']:.2f}" if r["gmu"] is not None else "default"
        ratio = f" {r['ratio']:8.2f}" if args.simulate else ""
        print(f"{r['case']:28} {frac:>8} {r['kv_bytes_per_token']:10,.0f} {r['weights_gb']:10.1f} "
              f"{r['reserve_gb']:10.1f} {r['kv_tokens']:11,.0f} {seqs}{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
