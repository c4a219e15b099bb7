"""vLLM's allgather_reducescatter EP exchange (Layout.all2all): a ring all-gather before the experts and a
ring reduce-scatter after, every rank's MoE layer over all gathered tokens; the deploy flag says so."""
from dataclasses import replace

import pytest

from rackplan.deploy import engine
from rackplan.sim.cost.alltoall import RingPhase, a2a_phase
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import Layout, SpecError, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit


def test_ring_phase_by_hand():
    # DEP8 on GB200, 1,024 tokens per rank, NVFP4 dispatch: 7,168 x 0.5625 B = 4,032 B a token. The gathered
    # tensor is 8 x 1,024 x 4,032 = 33,030,144 B; a ring moves 7/8 of it per GPU (28,901,376 B). The datasheet
    # profile has no all-reduce curve: the link fraction is 0.7 x S / (S + 1e6) (efficiency.ALLREDUCE_DATASHEET)
    # = 0.67943 of 900 GB/s NVLink, i.e. 47.26 us, plus the profile's 2 us op tail.
    model, hw, prof = load_model("deepseek-v3"), load_hardware("gb200-nvl72"), load_profile("datasheet")
    model = replace(model, dtypes=replace(model.dtypes, dispatch="nvfp4"))
    lay = Layout("decode", dp=8, all2all="allgather_reducescatter")
    disp = a2a_phase(model, lay, hw, prof, "dispatch", "low_latency")
    assert isinstance(disp, RingPhase) and disp.ranks == 8 and disp.bytes_per_token == pytest.approx(4032.0)
    gathered = 8 * 1024 * 4032.0
    eff = 0.7 * gathered / (gathered + 1e6)
    assert disp.seconds(1024) == pytest.approx(7 / 8 * gathered / (900e9 * eff) + 2e-6, rel=1e-9)
    assert disp.seconds(1024) == pytest.approx(49.26e-6, rel=1e-3)
    # the combine reduce-scatters BF16 outputs: 2 B an element, 14,336 B a token, the same ring
    comb = a2a_phase(model, lay, hw, prof, "combine", "low_latency")
    g2 = 8 * 1024 * 14336.0
    assert comb.seconds(1024) == pytest.approx(7 / 8 * g2 / (900e9 * 0.7 * g2 / (g2 + 1e6)) + 2e-6, rel=1e-9)


def test_gathered_step_routes_every_token_and_prices_the_ring():
    # the same DEP8 decode step under DeepEP and under allgather_reducescatter: the experts' pairs are the same
    # (8 x 128 x 8 / 8 = 1,024 a rank), the routing streams all 1,024 gathered tokens instead of the rank's
    # 128 (8x the bytes), and the exchange is the ring's
    model, hw, prof = load_model("deepseek-v3"), load_hardware("gb200-nvl72"), load_profile("datasheet")
    deep = Layout("decode", dp=8)
    ring = replace(deep, all2all="allgather_reducescatter")
    a = decode_step(CostContext(model, hw, deep, prof), 128, 128 * 2000.0)
    b = decode_step(CostContext(model, hw, ring, prof), 128, 128 * 2000.0)
    by = {s: {op.name: op for op in st.ops} for s, st in (("deep", a), ("ring", b))}
    assert by["ring"]["moe.experts"].flops == pytest.approx(by["deep"]["moe.experts"].flops)
    assert by["ring"]["moe.route"].bytes == pytest.approx(8 * by["deep"]["moe.route"].bytes)
    n_moe = by["ring"]["moe.dispatch"].count
    disp = a2a_phase(model, ring, hw, prof, "dispatch", "low_latency")
    assert by["ring"]["moe.dispatch"].seconds == pytest.approx(n_moe * disp.seconds(128), rel=1e-9)


def test_all2all_needs_an_exchange_and_reaches_the_serve_flags():
    with pytest.raises(SpecError, match="all2all"):
        Layout("both", dp=1, tp=4, all2all="allgather_reducescatter")  # TP MoE: no exchange between ranks
    flags = engine.parallel_flags(Layout("decode", dp=8, all2all="allgather_reducescatter"))
    assert flags[flags.index("--all2all-backend") + 1] == "allgather_reducescatter"
    flags = engine.parallel_flags(Layout("decode", dp=8))
    assert flags[flags.index("--all2all-backend") + 1] == "deepep_low_latency"
