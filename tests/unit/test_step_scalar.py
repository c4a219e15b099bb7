"""The step pricer's two entry points price the same step the same way.

A step is a few distinct per-rank works, as the simulator's representative batches are; a
`RankBatch` (per-rank arrays, one entry per prefill chunk, as measured steps have them) reduces
to the same formulas. Cases are random layouts (every embedded model, DP 1-128, TP, explicit EP,
DBO, speculation, EPLB, fixed and sampled imbalance, skew, CUDA graphs, async scheduling, fitted
profiles) and random steps, drawn from a fixed seed.
"""
import random
from functools import lru_cache

import numpy as np
import pytest

from rackplan.sim.cost.step import CostContext, RankBatch, RankWork, Step, step_cost
from rackplan.specs import EPLBConfig, Layout, Speculation, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit
MODELS = ("deepseek-v3", "deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4.1-flash", "qwen3-235b-a22b",
          "tiny-moe")
HARDWARE = ("h200-sxm", "h100-sxm", "h800", "b200", "gb200-nvl72", "gb300-nvl72", "cpu-local")
PROFILES = ("datasheet", "cpu-local", "h800-deepep", "gb200-nvl72-trtllm")
DPS = (1, 2, 3, 4, 8, 16, 32, 64, 72, 128)
NUM_CASES = 80
SEED = 20261201
model, hardware, profile = (lru_cache(maxsize=None)(f) for f in (load_model, load_hardware, load_profile))


def random_layout(rng: random.Random, m) -> Layout:
    dp = rng.choice(DPS)
    tp = rng.choice((1, 1, 1, 2, 4, 8)) if dp <= 16 else 1
    ep = dp if tp > 1 and rng.random() < 0.3 else None
    ep_size = ep or dp * tp
    num_e = m.moe.num_experts
    eplb = EPLBConfig()
    if ep_size > 1 and (num_e % ep_size or rng.random() < 0.4):
        redundant = (-num_e) % ep_size or ep_size * rng.choice((1, 2))
        eplb = EPLBConfig(redundant, rng.choice(("hierarchical", "global")))
    spec = None
    if m.draft is not None and rng.random() < 0.5:
        depth = rng.randint(1, m.draft.num_tokens)
        spec = Speculation(depth, 1.0 + depth * rng.uniform(0.0, 1.0))
    fixed = None if rng.random() < 0.25 else round(rng.uniform(1.0, 1.6), 3)
    return Layout(role=rng.choice(("prefill", "decode", "both")), dp=dp, tp=tp, ep=ep,
                  dbo=rng.random() < 0.5, cuda_graphs=rng.random() < 0.7, async_scheduling=rng.random() < 0.7,
                  speculation=spec, eplb=eplb, moe_imbalance=fixed)


def random_works(rng: random.Random, dp: int) -> list[list[float]]:
    """Distinct per-rank works [ranks, decode seqs, decode context sum, chunks, chunk tokens, prefix]
    that together cover the dp ranks."""
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


def rank_batch(works) -> RankBatch:
    """The works spread over their ranks, as per-rank arrays and per-sequence chunk arrays."""
    dec_b, dec_c, new, prefix = [], [], [], []
    for ranks, seqs, ctx, chunks, tokens, pre in works:
        for _ in range(int(ranks)):
            dec_b.append(seqs)
            dec_c.append(ctx)
            new.append(np.full(int(chunks), tokens))
            prefix.append(np.full(int(chunks), pre))
    if not any(w[3] for w in works):
        return RankBatch(np.array(dec_b), np.array(dec_c))
    return RankBatch(np.array(dec_b), np.array(dec_c), new, prefix)


def representative(works) -> Step:
    """The works as the scalar path takes them: one RankWork per distinct work, identical chunks
    as one (count, new, prefix) group."""
    rws = tuple(RankWork(seqs, ctx, ((chunks, tokens, prefix),) if chunks else ())
                for _, seqs, ctx, chunks, tokens, prefix in works)
    return Step(rws, tuple(int(w[0]) for w in works))


def _cases():
    rng = random.Random(SEED)
    out = []
    for i in range(NUM_CASES):
        name = MODELS[i % len(MODELS)]
        lay = random_layout(rng, model(name))
        out.append((name, rng.choice(HARDWARE), rng.choice(PROFILES), rng.choice((0.0, 0.0, 0.6)), lay,
                    random_works(rng, lay.dp)))
    return out


CASES = _cases()


def _close_ops(got: dict, want: dict, scale: float) -> list[str]:
    return [f"{k}: {got.get(k, 0.0)} != {want.get(k, 0.0)}" for k in sorted(set(got) | set(want))
            if abs(got.get(k, 0.0) - want.get(k, 0.0)) > 1e-9 * scale]


@pytest.mark.parametrize("i", range(NUM_CASES))
def test_per_sequence_batch_equals_representative_step(i):
    name, hw, prof, skew, lay, works = CASES[i]
    cx = CostContext(model(name), hardware(hw), lay, profile(prof), skew)
    per_seq = step_cost(cx, rank_batch(works))
    rep = step_cost(cx, representative(works))
    assert per_seq.seconds == pytest.approx(rep.seconds, rel=1e-12)
    assert not _close_ops(per_seq.breakdown(), rep.breakdown(), rep.seconds)


def test_halves_cut_the_tokens_in_two_as_vllm_does():
    # 400 prefill tokens: 3 chunks of 100, then 2 of 50 after 10 cached; the cut falls at token 200
    w = RankWork(5.0, 500.0, ((3, 100.0, 0.0), (2, 50.0, 10.0)))
    a, z = w.half(0), w.half(1)
    assert a == RankWork(2.5, 250.0, ((2, 100.0, 0.0),))
    assert z == RankWork(2.5, 250.0, ((1, 100.0, 0.0), (2, 50.0, 10.0)))
    # one 4,096-token prompt is split across the micro-batches: the second half sees the first as prefix
    one = RankWork(0.0, 0.0, ((1, 4096.0, 0.0),))
    assert one.half(0).chunks == ((1, 2048.0, 0.0),) and one.half(1).chunks == ((1, 2048.0, 2048.0),)
