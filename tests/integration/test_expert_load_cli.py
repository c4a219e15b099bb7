"""`--expert-load`: two recorded count files give different decode steps and TPOT in `whatif`, and the
step under the skewed file is, by hand, the step of a rank serving every pick (max/mean exactly 2)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rackplan.cli import main
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.sim.expert_load import from_counts
from rackplan.sim.search import whatif
from rackplan.sim.search.whatif_command import study
from tests.integration.test_whatif_cli import base  # noqa: F401, F811  (the tiny plan and its specs, a fixture)

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data"
UNIFORM, RANK0 = str(DATA / "expert_counts_uniform.jsonl"), str(DATA / "expert_counts_rank0.jsonl")


def test_skewed_counts_price_the_busiest_rank_by_hand(base):  # noqa: F811
    """DEP2, 16 experts: every pick on experts 0-7 lands on rank 0, so the step is the step of a fixed
    max/mean of 2 (Layout.moe_imbalance), and slower than the uniform file's."""
    plan, s = base
    lay = plan.decode[0]
    skewed = decode_step(CostContext(s.model, s.hw, lay, s.profile, from_counts(RANK0)), 16, 16 * 60)
    by_hand = decode_step(CostContext(s.model, s.hw, dataclasses.replace(lay, moe_imbalance=2.0), s.profile),
                          16, 16 * 60)
    flat = decode_step(CostContext(s.model, s.hw, lay, s.profile, from_counts(UNIFORM)), 16, 16 * 60)
    assert skewed.period_s == pytest.approx(by_hand.period_s, rel=1e-12)
    assert skewed.period_s > flat.period_s


def test_whatif_over_two_count_files_gives_different_tpot(base):  # noqa: F811
    plan, specs = base
    no_host = whatif.apply(specs, "cpu.overhead_scale", 0.0)  # the device step alone: the MoE part shows
    _, rows = study(plan, no_host, [("workload.expert_load", [UNIFORM, RANK0])], num_requests=64, seed=0)
    flat, skewed = (r.metrics["tpot_p50_s"] for r in rows)
    assert skewed > flat


def test_cli_flag_on_simulate_plan_and_whatif(capsys):
    assert main(["whatif", "--plan", "tiny-cpu", "--expert-load", f"{UNIFORM},{RANK0}", "--workers", "1",
                 "--num-requests", "32"]) == 0
    assert "expert_counts_rank0.jsonl" in capsys.readouterr().out
    assert main(["simulate", "--plan", "tiny-cpu", "--expert-load", RANK0, "--requests", "16"]) == 0
    assert main(["simulate", "--plan", "tiny-cpu", "--expert-load", str(DATA / "nope.jsonl")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
