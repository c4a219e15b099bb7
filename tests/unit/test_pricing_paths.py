"""The step pricer's shortcuts give exactly what the plain path gives.

A StepModel remembers rank works, a layer group's ops per token count, the Engram rows, GEMM and
EP-group prices, DBO halves (and whether they are equal) and their stage parts, whether a step's
imbalance varies per global token count, and (its HostModel) each rank work's host parts; binds each
op's efficiency curves and the API-server constants once; and, for a period alone, skips the unsplit
device work of a step DBO splits. None of that may change a price:
the same steps priced in a shuffled order by one StepModel (its memos warm, hits and misses mixed)
and each by a fresh one (every memo empty) agree to the last bit, in seconds, op breakdown and
period, on random layouts and batches of every embedded model (test_step_scalar's cases).
Curves bound once (GEMMs, attention per phase and kind, routed experts per GEMM shape) give what the
plain curves give. The simulator's pricer reuses one rank work per prefill rank key: a warm pricer
prices each step as a fresh one does.
The shipped configs parse to the same data through libyaml as through the checking loader.
"""
import random
from pathlib import Path

import numpy as np
import pytest

from rackplan.sim.cost import attention, efficiency, host
from rackplan.sim.cost.step import CostContext, StepModel
from rackplan.sim.pricer import StepPricer
from rackplan.specs import CONFIG_DIR, Curve, SpecError
from rackplan.specs.reading import parse_yaml

from .test_step_scalar import CASES, hardware, model, profile, representative

pytestmark = pytest.mark.unit
SEED = 11


def _steps(works, rng: random.Random) -> list:
    """The case's step, its works scaled a few ways (DBO thresholds crossed or not), repeated."""
    out = []
    for scale in (1.0, 0.5, 2.0, 0.013):
        scaled = [[r, s * scale, c * scale, ch, t * scale if ch else t, p] for r, s, c, ch, t, p in works]
        out.append(representative(scaled))
    return out * 2


@pytest.mark.parametrize("i", range(0, len(CASES), 2))
def test_remembered_prices_equal_fresh_ones(i):
    name, hw, prof, skew, lay, works = CASES[i]
    cx = CostContext(model(name), hardware(hw), lay, profile(prof), skew)
    rng = random.Random(SEED + i)
    steps = _steps(works, rng)
    rng.shuffle(steps)
    warm = StepModel(cx)
    for step in steps:
        fresh = StepModel(cx).price(step)
        got = warm.price(step)
        assert got.seconds == fresh.seconds
        assert got.breakdown() == fresh.breakdown()
        assert StepModel(cx).period(step) == fresh.period_s  # the period-only path (no unsplit device)
        assert warm.period(step) == fresh.period_s
        for z in (0.0, 1.0):
            assert warm.period(step, z) == StepModel(cx).period(step, z)
        assert warm.period_spread(step) == StepModel(cx).period_spread(step)  # (_varies remembered per tokens)


def test_bound_curves_equal_evaluate():
    cs = (Curve(eff_max=0.73, x_half=950.0, y_half=8941.0, z_half=1615.0, work_half=1.27e10, sharpness=3.2,
                tiles_half=0.78), Curve(eff_max=0.5, x_half=30.0, y_half=100.0))
    m = np.array([1.0, 7.0, 64.0, 129.0, 4096.0, 70000.0])
    for x in [*m.tolist(), m]:
        want = efficiency.evaluate(cs, x, 7168.0, 2048.0, 2.0 * x * 7168.0 * 2048.0)
        got = efficiency.evaluate_bound(efficiency.bind(cs, 7168.0, 2048.0), x, 2.0 * x * 7168.0 * 2048.0)
        assert np.array_equal(got, want)


def test_shipped_configs_parse_the_same_through_libyaml():
    files = sorted(Path(CONFIG_DIR).glob("*/*.yaml"))
    assert len(files) > 20
    for f in files:
        text = f.read_text()
        assert parse_yaml(text, str(f), shipped=True) == parse_yaml(text, str(f))
    with pytest.raises(SpecError, match="unique keys"):
        parse_yaml("a: 1\nb: 2\na: 3\n", "x.yaml", shipped=True)
    assert parse_yaml("x: 1e6\n", "x.yaml", shipped=True) == {"x": 1e6}


@pytest.mark.parametrize("name", ["gb300-nvl72-vllm", "h200-sxm-vllm", "datasheet"])
def test_bound_attention_and_expert_curves_equal_evaluate(name):
    """efficiency.attention_at and experts_at (what attention.Component and the StepModel keep) give
    what the plain curves give: evaluate at (ctx, flops per sequence) and at (rows, n, k, flops)."""
    prof = profile(name)
    for phase in ("prefill", "decode"):
        for kind in ("mla", "gqa", "csa"):
            at = efficiency.attention_at(prof, phase, kind, "bf16")
            cs = efficiency.curve(prof, f"attn.{phase}.{kind}.bf16") if prof.curves else None
            for batch, ctx, flops in ((1.0, 128.0, 3e9), (8.0, 4096.0, 7e11), (64.0, 70000.0, 2e14)):
                want = efficiency.evaluate(cs, ctx, flops / batch, 0.0, flops) if cs else prof.attn_eff
                assert at(batch, ctx, flops) == want == efficiency.attention(prof, phase, kind, "bf16", batch, ctx,
                                                                             flops)
    for dtype in ("fp4", "fp8", "fp8_block", "bf16"):
        at = efficiency.experts_at(prof, dtype, 4096.0, 7168.0)
        cs = efficiency.dtype_curve(prof, "experts", dtype)
        for rows in (1.0, 3.7, 96.0, 2048.0):
            flops = 2.0 * rows * 4096.0 * 7168.0
            want = (efficiency.evaluate(cs, rows, 4096.0, 7168.0, flops) if cs
                    else efficiency.gemm(prof, dtype, rows, 4096.0, 7168.0))
            assert at(rows, flops) == want


@pytest.mark.parametrize("i", range(1, len(CASES), 4))
def test_interned_prefill_works_price_as_fresh_ones(i):
    """StepPricer.step reuses one rank work per rank key (so the StepModel's memos find it by
    identity): a pricer that has priced many steps, in a shuffled order, gives each step the
    period a fresh pricer gives it."""
    name, hw, prof, skew, lay, _ = CASES[i]
    cx = CostContext(model(name), hardware(hw), lay, profile(prof), skew)
    rng = random.Random(SEED + i)
    dp = lay.dp
    steps = []
    for _ in range(12):  # per rank: chunks (rid, new tokens, prefix), and the running decode sequences
        chunks = [[(0, rng.choice((64, 700, 4096, 9000)), rng.choice((0, 0, 512, 30000)))
                   for _ in range(rng.choice((0, 1, 1, 2, 3)))] for _ in range(dp)]
        batch = np.array([float(rng.choice((0, 0, 3, 17))) for _ in range(dp)])
        steps.append((chunks, batch, batch * rng.uniform(100.0, 20000.0)))
    steps = steps * 2
    rng.shuffle(steps)
    warm = StepPricer(cx)
    for chunks, batch, ctx in steps:
        assert warm.step(chunks, batch, ctx) == StepPricer(cx).step(chunks, batch, ctx)
        assert warm.step(chunks) == StepPricer(cx).step(chunks)


@pytest.mark.parametrize("i", range(3, len(CASES), 8))
def test_remembered_host_parts_and_bound_api_equal_fresh_ones(i):
    """HostModel remembers rank_parts per RankHost and binds api_seconds' layout constants: a warm model
    gives every step's HostTime and API seconds as a fresh one and the plain functions do."""
    name, hw, prof, skew, lay, _ = CASES[i]
    m, h, p = model(name), hardware(hw), profile(prof)
    args = (p.host_for(lay.role), lay, m.num_layers, h.gpus_per_node, h.host_overlap)
    warm = host.HostModel(*args)
    rng = random.Random(SEED + i)
    for _ in range(40):
        ranks = [warm.rank(rng.choice((0.0, 3.0, 17.5, 256.0)), rng.choice((0.0, 1.0, 4.0)),
                          rng.choice((0.0, 900.0, 8192.0)), rng.choice((0.0, 0.25)), rng.choice((0.0, 1.5)))
                 for _ in range(rng.choice((1, 2, 3)))]
        gpu, graphs, dec, pre = rng.uniform(1e-4, 0.05), rng.random() < 0.5, rng.uniform(0, 300), rng.uniform(0, 4)
        api = host.api_seconds(args[0], lay, h.gpus_per_node, dec, pre, warm.acceptance)
        assert warm.api(dec, pre) == api
        assert warm.time(ranks, gpu, graphs, api) == host.HostModel(*args).time(ranks, gpu, graphs, api)


def test_attended_entries_equal_the_min_form():
    """attention.attended (its min() calls written out) reads min(min(ctx, window) / ratio, topk) entries."""
    names = ("deepseek-v3.2", "deepseek-v4.1-flash", "qwen3-235b-a22b")
    for comp in [c for n in names for c in model(n).attention.kv]:
        for ctx in (0.0, 1.0, 127.0, 128.0, 129.5, 512.0, 4096.0, 4096.0 * comp.ratio, 1e6):
            span = min(ctx, comp.window) if comp.window is not None else ctx
            want = min(span / comp.ratio, comp.topk) if comp.topk is not None else span / comp.ratio
            assert attention.attended(comp, ctx) == want
