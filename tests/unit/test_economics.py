"""Cost and power per token (rackplan/economics.py): every expected value derived by hand."""
from __future__ import annotations

import dataclasses

import pytest

from rackplan.economics import (
    DEFAULT_PUE,
    CostSpec,
    busy_share,
    figures,
    gpu_power_w,
    lines,
    load_cost,
    prices_for,
)
from rackplan.specs import load_hardware, load_plan
from rackplan.specs.fields import SpecError

pytestmark = pytest.mark.unit


@pytest.fixture
def hw():
    # round figures so the arithmetic below is done by hand
    return dataclasses.replace(load_hardware("gb300-nvl72"), power_idle_w=500.0, power_loaded_w=1500.0,
                               price_per_gpu_hour=5.0, price_source="test list")


def test_power_is_linear_in_busy_share(hw):
    assert gpu_power_w(hw, 0.0) == 500.0
    assert gpu_power_w(hw, 1.0) == 1500.0
    assert gpu_power_w(hw, 0.6) == pytest.approx(1100.0)  # 500 + 0.6 x 1000
    assert gpu_power_w(hw, 1.7) == 1500.0  # clipped to full load


def test_rack_figures_by_hand(hw):
    # 72 GPUs x $5/h = $360/h; 72 x 1000 output tok/s = 259.2 M tokens/h -> $360 / 259.2 = $1.3889 per M
    # power: (500 + 0.6 x 1000) W x 72 = 79.2 kW IT, x PUE 1.25 = 99 kW facility
    # -> 72,000 tok/s / 0.099 MW = 727,273 tok/s/MW; 99,000 W / 72,000 tok/s = 1.375 J per token
    eco = figures(hw, prices_for(hw, pue=1.25), 72, 0.6, 72_000.0, 288_000.0)
    assert eco.usd_per_hour == pytest.approx(360.0)
    assert eco.usd_per_m_output == pytest.approx(360.0 / 259.2)
    assert eco.usd_per_m_input == pytest.approx(360.0 / (288_000 * 3600 / 1e6))  # $0.3472 per M input
    assert eco.it_power_w == pytest.approx(79_200.0)
    assert eco.facility_power_w == pytest.approx(99_000.0)
    assert eco.output_tps_per_mw == pytest.approx(72_000 / 0.099)
    assert eco.joules_per_output_token == pytest.approx(1.375)


def test_energy_price_adds_facility_kwh(hw):
    # $360/h of GPUs + 99 kW x $0.10/kWh = $369.90/h
    eco = figures(hw, prices_for(hw, kwh=0.10, pue=1.25), 72, 0.6, 72_000.0, 0.0)
    assert eco.usd_per_hour == pytest.approx(369.9)
    assert eco.usd_per_m_input == float("inf")  # no input tokens served


def test_flags_override_the_list_price(hw):
    p = prices_for(hw, per_gpu_hour=2.0)
    assert (p.per_gpu_hour, p.kwh, p.pue, p.source) == (2.0, 0.0, DEFAULT_PUE, "--price-per-gpu-hour")
    assert prices_for(hw).source == "test list"


def test_cost_yaml_amortises_capex(hw, tmp_path):
    # $43,800 over 5 years of 8,760 h = $1.00/h, + $0.50/h opex = $1.50 per GPU-hour
    f = tmp_path / "cost.yaml"
    f.write_text("capex_per_gpu: 43800\namortisation_years: 5\nopex_per_gpu_hour: 0.5\nkwh_price: 0.08\npue: 1.1\n")
    p = prices_for(hw, cost=load_cost(f))
    assert (p.per_gpu_hour, p.kwh, p.pue) == (pytest.approx(1.5), 0.08, 1.1)
    assert prices_for(hw, pue=1.3, cost=load_cost(f)).pue == 1.3  # a flag beats the file


def test_bad_cost_yaml_names_the_field(tmp_path):
    f = tmp_path / "cost.yaml"
    f.write_text("capex_per_gpu: 1000\namortisation_years: 0\n")
    with pytest.raises(SpecError, match="amortisation_years"):
        load_cost(f)
    with pytest.raises(SpecError, match="pue"):
        CostSpec(1000.0, 3.0, pue=0.9)


def test_busy_share_weights_instances_by_gpus():
    # tiny-disagg: 2 prefill replicas of 1 GPU, 1 decode instance of 1 GPU -> (0.5 + 0.3 + 0.9) / 3
    plan = load_plan("tiny-disagg")
    util = {"prefill[0].0": 0.5, "prefill[0].1": 0.3, "decode[0].0": 0.9}
    assert busy_share(plan, util) == pytest.approx(1.7 / 3)


def test_no_price_no_power():
    cpu = load_hardware("cpu-local")
    assert figures(cpu, prices_for(cpu), 1, 1.0, 10.0, 10.0) is None
    assert "no power figures" in lines(None, cpu)[0]
    h = load_hardware("h200-sxm")
    eco = figures(h, prices_for(dataclasses.replace(h, price_per_gpu_hour=0.0)), 8, 1.0, 100.0, 100.0)
    assert eco.usd_per_m_output is None and "usd_per_m_output_tokens" not in eco.to_dict()
    assert "--price-per-gpu-hour" in lines(eco, h)[1]


@pytest.mark.parametrize("name", ["gb300-nvl72", "gb200-nvl72", "b200", "b300", "h200-sxm", "h100-sxm", "h800"])
def test_shipped_hardware_is_priced_and_sourced(name):
    h = load_hardware(name)
    assert 0 < h.power_idle_w < h.power_loaded_w and h.board_power_w <= h.power_loaded_w
    assert h.price_per_gpu_hour > 0 and h.price_source and h.power_source


def test_flags_on_hardware_without_power_are_refused():
    from argparse import Namespace

    from rackplan.economics import prices_from_args

    args = Namespace(price_per_gpu_hour=2.0, kwh_price=None, pue=None, cost=None)
    with pytest.raises(SpecError, match="--price-per-gpu-hour"):
        prices_from_args(args, load_hardware("cpu-local"))
    assert prices_from_args(args, load_hardware("h200-sxm")).per_gpu_hour == 2.0
    with pytest.raises(SpecError, match="--pue"):
        prices_from_args(Namespace(price_per_gpu_hour=None, kwh_price=None, pue=0.9, cost=None),
                         load_hardware("h200-sxm"))


def test_power_budget_holds_whole_copies_and_the_idle_rest(hw):
    # 16-GPU deployment at busy share 1: 16 x 1500 W = 24 kW IT; budget 72 GPUs, PUE 1.25, idle 500 W.
    # k copies draw (k x 24 kW + (72 - 16 k) x 0.5 kW) x 1.25 = (36 + 16 k) x 1.25 kW: k = 4 -> 125 kW,
    # k = 3 -> 105 kW. Within 0.11 MW: 3 copies, 3 x 16,000 tok/s; $/M = 72 x $5 / (48,000 x 3600 / 1e6)
    from rackplan.economics import on_budget

    eco = figures(hw, prices_for(hw, pue=1.25), 16, 1.0, 16_000.0, 0.0)
    free = on_budget(hw, eco, 72)
    assert (free.copies, free.facility_power_w) == (4, pytest.approx(125_000.0))
    capped = on_budget(hw, eco, 72, 110_000.0)
    assert (capped.copies, capped.output_tps, capped.facility_power_w) == (3, 48_000.0, pytest.approx(105_000.0))
    assert capped.usd_per_m_output == pytest.approx(360.0 / (48_000 * 3600 / 1e6))
    assert capped.output_tps_per_mw == pytest.approx(48_000 / 0.105)
    # below the idle rack plus one copy ((24 + 56 x 0.5) x 1.25 = 65 kW): no copy fits
    assert on_budget(hw, eco, 72, 60_000.0).copies == 0
