"""`rackplan explain`: a step of each pool op by op; the ops sum to the step price the simulator uses."""
from __future__ import annotations

import json

import pytest

from rackplan.cli import main
from rackplan.sim.commands.explain import explain
from rackplan.sim.cost.step import CostContext
from rackplan.sim.pricer import StepPricer
from rackplan.sim.search.estimate import traffic_of
from rackplan.specs import load_hardware, load_model, load_plan, load_workload, resolve_profile

pytestmark = pytest.mark.integration
PLANS = ["v41-flash-gb300-nvl72", "tests/data/h200-dsv3-32gpu.yaml"]


def _specs(ref):
    plan = load_plan(ref)
    return (plan, load_model(plan.model), load_hardware(plan.hardware),
            resolve_profile(None, plan.profile, plan.hardware), traffic_of(load_workload(plan.workload)))


@pytest.mark.parametrize("ref", PLANS)
@pytest.mark.parametrize("batch", [None, 7])
def test_op_tables_sum_to_the_simulators_step_price(ref, batch):
    plan, model, hw, prof, tr = _specs(ref)
    steps = explain(plan, model, hw, prof, tr, batch)
    assert [s.pool for s in steps] == ["prefill"] * len(plan.prefill) + ["decode"] * len(plan.decode)
    for s in steps:
        lay = next(lay for lay in getattr(plan, s.pool) if lay.tag == s.layout)
        # the simulator's pricer of this layout (sim/pricer.py), a fresh one: its period of the same step
        sim = StepPricer(CostContext(model, hw, lay, prof, tr.skew))
        period = sim.model.period(s.step)
        assert sum(r.seconds for r in s.rows) == pytest.approx(period, rel=1e-9)
        assert s.period_s == pytest.approx(period, rel=1e-12)
        assert sum(r.share for r in s.rows) == pytest.approx(1.0, rel=1e-9)
        # every op of the step's breakdown is a row (merged by name), none invented
        names = {r.name for r in s.rows} - {"host.api_wait"}
        assert names == {k for k, v in sim.price(s.step).breakdown().items() if v != 0.0}
        if s.pool == "decode" and batch:
            assert s.step.works[0].dec_seqs == batch and s.title.startswith(f"decode step: {batch} sequences")
        assert s.kv.kv_tokens > 0 and s.kv.sequences > 0


def test_rows_name_their_curve_bound_and_fit_error():
    plan, model, hw, prof, tr = _specs(PLANS[1])
    dec = next(s for s in explain(plan, model, hw, prof, tr) if s.pool == "decode")
    rows = {r.name: r for r in dec.rows}
    # DeepSeek-V3 block-FP8 experts on h200's measured profile: experts.fp8_block, its recorded fit error
    assert rows["moe.experts"].curve == "experts.fp8_block (measured curve)"
    assert rows["moe.experts"].fit_error_pct == prof.fit_error["experts.fp8_block"]
    assert rows["moe.experts"].bound.startswith(("memory", "compute"))
    assert rows["moe.dispatch"].bound == "link"
    # the plan's estimated batch (40.68 per rank) rounded, under the layout's cap of 64
    assert dec.step.works[0].dec_seqs == 41


def test_explain_cli_tables_and_json(capsys):
    assert main(["explain", "--plan", PLANS[1], "--batch", "16"]) == 0
    out = capsys.readouterr().out
    for word in ("prefill DEP8", "decode DEP16", "decode step: 16 sequences per rank", "KV cache per rank",
                 "roofline bound", "priced by", "fit error %"):
        assert word in out
    assert main(["explain", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["plan"] == "v41-flash-gb300-nvl72" and {s["pool"] for s in d["steps"]} == {"prefill", "decode"}
    for s in d["steps"]:
        assert sum(r["seconds"] for r in s["rows"]) == pytest.approx(s["period_s"], rel=1e-9)
    assert main(["explain", "--batch", "0"]) == 2
