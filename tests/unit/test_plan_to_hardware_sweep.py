"""benchmarks/plan_to_hardware.py's sweep: which sizes it measures and holds out for a plan, and what a
re-plan with the fitted profile adds when it runs shapes beyond them."""
import dataclasses

import pytest
from bench_scripts import script

from rackplan.specs import load_plan

p2h = script("plan_to_hardware.py")

pytestmark = pytest.mark.unit


def _plan(batch: int, budget: int):
    plan = load_plan("tiny-cpu")
    return dataclasses.replace(plan, decode=(dataclasses.replace(plan.decode[0], max_batch_per_rank=batch),),
                               prefill=(dataclasses.replace(plan.prefill[0], max_tokens_per_step=budget),))


def test_the_sweep_covers_the_plan_and_holds_out_every_other_interior_size():
    cfg = p2h.sweep_cfg(_plan(16, 256), quick=False, max_batch=None, max_tokens=None)
    assert cfg["decode"] == (1, 2, 4, 8, 16) and cfg["prefill"] == (32, 64, 128, 256)
    assert cfg["holdout"] == ("decode:2,8", "prefill:64")
    assert p2h.uncovered(_plan(16, 256), cfg) == {}


def test_a_replan_beyond_the_sweep_adds_its_sizes_within_the_caps():
    cfg = p2h.sweep_cfg(_plan(16, 256), quick=False, max_batch=None, max_tokens=None)
    more = p2h.uncovered(_plan(64, 256), cfg)
    assert more == {"decode": (32, 64)}
    ext = p2h.extend(cfg, more)
    assert ext["decode"] == (1, 2, 4, 8, 16, 32, 64) and ext["holdout"] == ("decode:2,8,32", "prefill:64")
    capped = p2h.sweep_cfg(_plan(16, 256), quick=False, max_batch=16, max_tokens=None)
    assert p2h.uncovered(_plan(64, 256), capped) == {}  # --max-batch still caps decode


def test_the_prefill_sweep_stops_at_what_the_plans_steps_fill():
    # tiny-cpu's prefill runs at most 8 prompts a step; tiny-chat's prompts are 56 tokens on average (16-96):
    # 448 tokens, so a 2,048-token budget is swept to 256, the largest power of two its steps fill
    assert p2h.fillable(_plan(16, 2048)) == 256
    cfg = p2h.sweep_cfg(_plan(16, 2048), quick=False, max_batch=None, max_tokens=None)
    assert cfg["prefill"] == (32, 64, 128, 256) and cfg["covers"]["prefill_tokens"] == [256, 2048]
    assert p2h.uncovered(_plan(16, 8192), cfg) == {}


def test_the_plan_is_priced_with_every_shape_and_scored_on_the_held_out_fit(tmp_path, monkeypatch):
    # two calibrate calls: the held-out fit (validate scores it: the MAPE gate) and the fit on every shape
    # (the re-plan and the simulator price with it: the plan's batch cap, a held-out size, is in its fit)
    calls = []
    monkeypatch.setattr(p2h.calibration_loop, "sh", calls.append)
    cfg = p2h.sweep_cfg(_plan(16, 256), quick=False, max_batch=None, max_tokens=None)
    prof = tmp_path / "cpu-local.yaml"
    held = p2h.fit(tmp_path / "plan.yaml", [tmp_path / "a", tmp_path / "b"], tmp_path / "loop", cfg, prof)
    assert held == tmp_path / "cpu-local-heldout.yaml" == p2h.held_out_path(prof)
    first, second = calls
    assert first[first.index("--out") + 1] == str(held) and second[second.index("--out") + 1] == str(prof)
    assert [first[i + 1] for i, a in enumerate(first) if a == "--holdout"] == ["decode:2,8", "prefill:64"]
    assert "--holdout" not in second and "--no-holdout" in second and "--no-holdout" not in first
    assert [a for a in first if a not in ("--holdout", "decode:2,8", "prefill:64")][:-2] == \
        [a for a in second if a != "--no-holdout"][:-2]  # the same measurements, plan and name


def test_each_round_measures_every_point_once_in_its_own_seeded_order():
    points = [f"p{i}" for i in range(8)]
    order = p2h.sweep_order(points, 4, seed=0)
    assert len(order) == 32 and [r for r, _ in order] == [r for r in range(4) for _ in range(8)]
    rounds = [[p for r, p in order if r == rnd] for rnd in range(4)]
    assert all(sorted(r) == points for r in rounds)  # every point once a round
    assert len({tuple(r) for r in rounds}) == 4  # shuffled differently each round
    assert order == p2h.sweep_order(points, 4, seed=0) != p2h.sweep_order(points, 4, seed=1)  # seeded


class _Neighbour:
    """Records which phase the sweep's neighbour runs when each execute starts."""

    def __init__(self):
        self.phase, self.closed, self.steps = None, False, {"prefill": 0, "decode": 0}

    def run(self, phase):
        self.phase = phase

    def idle(self):
        self.phase = None

    def close(self):
        self.closed = True


def test_every_sweep_point_runs_beside_the_other_phase(tmp_path, monkeypatch):
    nb, seen = _Neighbour(), []
    monkeypatch.setattr(p2h, "neighbour", lambda plan_path: nb)
    monkeypatch.setattr(p2h.calibration_loop, "sh", lambda cmd: seen.append((cmd[cmd.index("--out") + 1], nb.phase)))
    cfg = {**p2h.sweep_cfg(_plan(4, 64), quick=False, max_batch=None, max_tokens=None), "quiet_s": 0.0}
    plan_path = tmp_path / "plan.yaml"
    p2h.calibration_loop.dump_yaml(_plan(4, 64), plan_path)
    runs = p2h.run_sweep(plan_path, cfg, tmp_path)
    # decode b1, b2, b4 and prefill t32, t64, each once in each of the SWEEP_ROUNDS rounds
    assert len(runs) == len(seen) == 5 * p2h.SWEEP_ROUNDS and nb.closed
    assert all(phase == ("prefill" if "/decode-" in out else "decode") for out, phase in seen)
    alone = {**cfg, "corun": False}
    monkeypatch.setattr(p2h, "neighbour", lambda plan_path: pytest.fail("no neighbour when alone"))
    assert len(p2h.run_sweep(plan_path, alone, tmp_path / "alone")) == 5 * p2h.SWEEP_ROUNDS
