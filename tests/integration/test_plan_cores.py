"""The planner keeps to the busy ranks a CPU rig runs at once: a 4-rank budget on a 2-core rig plans 2."""
import subprocess
import sys

import pytest
import yaml

from rackplan.specs import CONFIG_DIR, load_plan

pytestmark = pytest.mark.integration


def test_plan_budget_capped_by_the_rigs_cores(tmp_path):
    hw = yaml.safe_load((CONFIG_DIR / "hardware" / "cpu-local.yaml").read_text())
    hw["cores"] = 2  # stated, not detected: the same on any machine
    (tmp_path / "cpu2.yaml").write_text(yaml.safe_dump(hw))
    res = subprocess.run([sys.executable, "-m", "rackplan.cli", "plan", "--model", "tiny-moe", "--hardware",
                          str(tmp_path / "cpu2.yaml"), "--gpus", "4", "--workload", "tiny-chat", "--ttft-p90", "1s",
                          "--tpot-p90", "200ms", "--out", str(tmp_path / "plan.yaml"), "--quiet"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "runs 2 busy ranks at once (2 cores / 1 threads per rank): budget 4 -> 2" in res.stderr
    plan = load_plan(tmp_path / "plan.yaml")
    assert plan.num_gpus == 2
    assert plan.gpus_used <= 2
