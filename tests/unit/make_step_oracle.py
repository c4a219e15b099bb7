"""Write tests/unit/data/step_oracle.json: random representative steps and their prices.

The fixture was first written by the vectorised (numpy over ranks) cost model at commit 70238ab,
so tests/unit/test_step_scalar.py checks that the scalar path gives the same seconds and the same
op breakdown. Each case is a layout (every embedded model, DP 1-128, TP, explicit EP, DBO,
speculation, EPLB, fixed imbalance, skew, CUDA graphs, async scheduling, profiles with fitted
per-op terms) and a step of a few distinct per-rank works, each repeated over some ranks: decode
sequences with a context sum, plus identical prefill chunks. The step goes through the general
per-sequence entry point (`step_cost` of a `RankBatch`), which every version of the cost model has.

After an intended change to the cost model's numbers, regenerate it and say why in the commit:
    python tests/unit/make_step_oracle.py
"""
from __future__ import annotations

import json
import random
from functools import lru_cache
from pathlib import Path

import numpy as np

from rackplan.sim.cost.step import CostContext, RankBatch, step_cost
from rackplan.specs import EPLBConfig, Layout, Speculation, load_hardware, load_model, load_profile

OUT = Path(__file__).parent / "data" / "step_oracle.json"
MODELS = ("deepseek-v3", "deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4.1-flash", "qwen3-235b-a22b",
          "tiny-moe")
HARDWARE = ("h200-sxm", "h100-sxm", "h800", "b200", "gb200-nvl72", "gb300-nvl72", "cpu-local")
PROFILES = ("datasheet", "cpu-local", "h800-deepep", "gb200-nvl72-trtllm")
DPS = (1, 2, 3, 4, 8, 16, 32, 64, 72, 128)
NUM_CASES = 240
SEED = 20261201


def random_layout(rng: random.Random, model) -> Layout:
    dp = rng.choice(DPS)
    tp = rng.choice((1, 1, 1, 2, 4, 8)) if dp <= 16 else 1
    ep = dp if tp > 1 and rng.random() < 0.3 else None
    ep_size = ep or dp * tp
    num_e = model.moe.num_experts
    eplb = EPLBConfig()
    if ep_size > 1 and (num_e % ep_size or rng.random() < 0.4):
        redundant = (-num_e) % ep_size or ep_size * rng.choice((1, 2))
        eplb = EPLBConfig(redundant, rng.choice(("hierarchical", "global")))
    spec = None
    if model.draft is not None and rng.random() < 0.5:
        depth = rng.randint(1, model.draft.num_tokens)
        spec = Speculation(depth, 1.0 + depth * rng.uniform(0.0, 1.0))
    # a quarter of the cases sample the routing model (slow the first time: ~15 ms a grid point)
    fixed = None if rng.random() < 0.25 else round(rng.uniform(1.0, 1.6), 3)
    return Layout(role=rng.choice(("prefill", "decode", "both")), dp=dp, tp=tp, ep=ep,
                  dbo=rng.random() < 0.5, cuda_graphs=rng.random() < 0.7, async_scheduling=rng.random() < 0.7,
                  speculation=spec, eplb=eplb, moe_imbalance=fixed)


def random_works(rng: random.Random, dp: int) -> list[list[float]]:
    """Distinct per-rank works [ranks, decode seqs, decode context sum, chunks, chunk tokens, prefix]
    that together cover the dp ranks (the first work is the one on rank 0)."""
    kind = rng.choice(("decode", "prefill", "mixed"))
    distinct = min(dp, rng.choice((1, 2, 2, 3)))
    cuts = sorted(rng.sample(range(1, dp), distinct - 1)) if distinct > 1 else []
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [dp])]
    works = []
    for ranks in sizes:
        seqs = rng.choice((0, 1, 2, 3, 7, 16, 64, 127.5, 256, 512)) if kind != "prefill" else 0
        ctx = seqs * rng.uniform(1.0, 40000.0)
        chunks = rng.choice((0, 1, 1, 2, 3, 8)) if kind != "decode" else 0
        tokens = float(rng.randint(1, 16384)) if chunks else 0.0
        prefix = float(rng.choice((0, 0, rng.randint(1, 60000)))) if chunks else 0.0
        works.append([ranks, float(seqs), float(ctx), chunks, tokens, prefix])
    if all(w[1] == 0 and w[3] == 0 for w in works):
        works[0][1], works[0][2] = 1.0, 1000.0
    return works


def rank_batch(works: list[list[float]]) -> RankBatch:
    """The works spread over their ranks, as per-rank arrays and per-sequence chunk arrays."""
    dec_b, dec_c, new, prefix = [], [], [], []
    for ranks, seqs, ctx, chunks, tokens, pre in works:
        for _ in range(int(ranks)):
            dec_b.append(seqs)
            dec_c.append(ctx)
            new.append(np.full(int(chunks), tokens))
            prefix.append(np.full(int(chunks), pre))
    has_pre = any(w[3] for w in works)
    if not has_pre:
        return RankBatch(np.array(dec_b), np.array(dec_c))
    return RankBatch(np.array(dec_b), np.array(dec_c), new, prefix)


def layout_json(lay: Layout) -> dict:
    spec = [lay.speculation.num_tokens, lay.speculation.acceptance_length] if lay.speculation else None
    return {"role": lay.role, "dp": lay.dp, "tp": lay.tp, "ep": lay.ep, "dbo": lay.dbo,
            "cuda_graphs": lay.cuda_graphs, "async_scheduling": lay.async_scheduling, "speculation": spec,
            "eplb": [lay.eplb.redundant_experts, lay.eplb.policy], "moe_imbalance": lay.moe_imbalance}


def layout_from_json(d: dict) -> Layout:
    spec = Speculation(*d["speculation"]) if d["speculation"] else None
    return Layout(role=d["role"], dp=d["dp"], tp=d["tp"], ep=d["ep"], dbo=d["dbo"], cuda_graphs=d["cuda_graphs"],
                  async_scheduling=d["async_scheduling"], speculation=spec, eplb=EPLBConfig(*d["eplb"]),
                  moe_imbalance=d["moe_imbalance"])


def make_cases(n: int = NUM_CASES, seed: int = SEED) -> list[dict]:
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        model_name = MODELS[i % len(MODELS)]
        lay = random_layout(rng, model(model_name))
        case = {"model": model_name, "hardware": rng.choice(HARDWARE), "profile": rng.choice(PROFILES),
                "skew": rng.choice((0.0, 0.0, 0.6)), "layout": layout_json(lay), "works": random_works(rng, lay.dp)}
        cases.append(case)
    return cases


model, hardware, profile = (lru_cache(maxsize=None)(f) for f in (load_model, load_hardware, load_profile))


def context(case: dict) -> CostContext:
    return CostContext(model(case["model"]), hardware(case["hardware"]), layout_from_json(case["layout"]),
                       profile(case["profile"]), case["skew"])


def price(case: dict):
    cx = context(case)
    return step_cost(cx, rank_batch(case["works"]))


def main() -> None:
    cases = make_cases()
    for case in cases:
        cost = price(case)
        case["seconds"] = cost.seconds
        case["ops"] = cost.breakdown()
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"source": "tests/unit/make_step_oracle.py", "cases": cases}, indent=None) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
