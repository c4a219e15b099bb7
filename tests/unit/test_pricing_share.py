"""benchmarks/pricing_share.py: a simulation whose step-price caches start filled gives the same figures
without pricing a step, so its CPU difference from a cold run is what the misses cost."""
import pytest

from rackplan.sim import pricer
from rackplan.specs import load_plan, load_profile, load_workload
from tests.bench_scripts import script

pytestmark = pytest.mark.unit


def test_filled_caches_give_the_same_figures_and_price_nothing(monkeypatch):
    mod = script("pricing_share.py")
    monkeypatch.setattr(pricer.StepPricer, "shared", classmethod(mod._filled))
    monkeypatch.setattr(pricer, "_kept", type(pricer._kept)())
    plan = load_plan("v41-flash-gb300-nvl72")
    wl, prof = load_workload(plan.workload), load_profile("gb300-nvl72-vllm")
    _, cold = mod.run(plan, wl, prof, 150, {})
    misses = {k: p.misses for k, p in mod.SEEN.items()}
    assert misses[("prefill", True)] > 0 and misses[("decode", True)] > 0
    full = {k: dict(p._cache) for k, p in mod.SEEN.items()}
    _, warm = mod.run(plan, wl, prof, 150, full)
    assert repr(warm) == repr(cold)  # (repr: NaN standard errors of a short run)
    assert {k: p.misses for k, p in mod.SEEN.items()} == dict.fromkeys(misses, 0)
    prefill_only = {k: v for k, v in full.items() if k[0] == "prefill"}
    _, half = mod.run(plan, wl, prof, 150, prefill_only)
    assert repr(half) == repr(cold)
    assert mod.SEEN[("prefill", True)].misses == 0 and mod.SEEN[("decode", True)].misses == misses[("decode", True)]
