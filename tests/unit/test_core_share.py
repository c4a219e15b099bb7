"""A CPU rig knows its cores: ranks that share them are priced slower in proportion, and the planner keeps
to the ranks the rig runs at once. Expected values derived by hand."""
import dataclasses

import pytest

from rackplan.sim.cost.cores import core_share
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import load_hardware, load_model, load_plan, load_profile

pytestmark = pytest.mark.unit
CPU = load_hardware("cpu-local")


def _cpu(cores: int, threads: int = 1):
    return dataclasses.replace(CPU, cores=cores, threads_per_rank=threads)


def test_cpu_local_states_its_cores_and_threads():
    assert CPU.kind == "cpu" and CPU.threads_per_rank == 1
    assert CPU.cores == 2 and CPU.rank_cores == 2  # stated: the dev machine the file was measured on
    assert dataclasses.replace(CPU, cores=0).rank_cores >= 1  # 0: detected


def test_core_share_by_hand():
    assert _cpu(2).core_share(2) == 1.0
    assert _cpu(2).core_share(3) == 1.5  # 3 single-thread ranks on 2 cores
    assert _cpu(4, threads=2).core_share(3) == 1.5  # 6 threads on 4 cores
    assert _cpu(8).core_share(3) == 1.0
    assert _cpu(4, threads=2).rank_capacity == 2 and _cpu(3).rank_capacity == 3
    assert load_hardware("h100-sxm").core_share(64) == 1.0


def test_core_share_of_plans():
    assert core_share(_cpu(2), load_plan("tiny-disagg")) == 1.5  # 2 prefill replicas + 1 decode, each DEP1
    assert core_share(_cpu(2), load_plan("tiny-cpu")) == 1.0  # colocated DEP2 prefill + DEP2 decode share 2 ranks


def test_shared_cores_price_a_step_slower_in_proportion():
    plan, model, prof = load_plan("tiny-disagg"), load_model("tiny-moe"), load_profile("cpu-local")
    hw = _cpu(2)
    alone = decode_step(CostContext(model, hw, plan.decode[0], prof), 8, 8 * 300)
    shared = decode_step(CostContext(model, hw, plan.decode[0], prof, core_share=1.5), 8, 8 * 300)
    assert shared.seconds == pytest.approx(1.5 * alone.seconds, rel=1e-12)
    ops = {op.name: op.seconds for op in shared.ops}
    assert ops["cores.shared"] == pytest.approx(0.5 * alone.seconds, rel=1e-12)
    assert sum(ops.values()) == pytest.approx(shared.seconds, rel=1e-9)  # the breakdown still sums to the step
