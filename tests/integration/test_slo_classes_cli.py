"""A two-class workload (interactive p99 TTFT / TPOT, batch p90 E2E) plans and reports each class's
attainment; `simulate` prints it too; a class target the plan cannot meet fails verification."""
from __future__ import annotations

import pytest

from rackplan.cli import main

pytestmark = pytest.mark.integration
WORKLOAD = """name: tiny-classes
arrival: {kind: poisson, rate: 8.0}
isl: {kind: uniform, low: 16, high: 96}
osl: {kind: uniform, low: 4, high: 24}
num_requests: 64
classes:
  - {name: interactive, share: 0.7, slo: {ttft_p99_s: 1.0, tpot_p99_s: %s}}
  - {name: batch, share: 0.3, osl: {kind: fixed, value: 40}, slo: {e2e_p90_s: 60}, priority: 1}
"""


def _plan(tmp_path, tpot_p99: str, *extra: str) -> int:
    wl = tmp_path / "wl.yaml"
    wl.write_text(WORKLOAD % tpot_p99)
    return main(["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", str(wl),
                 "--workers", "1", "--quiet", "--out", str(tmp_path / "plan.yaml"), *extra])


def test_two_classes_plan_and_report_their_attainment(tmp_path, capsys):
    assert _plan(tmp_path, "0.2") == 0
    out = capsys.readouterr().out
    inter = next(line for line in out.splitlines() if line.startswith("class interactive:"))
    assert "within their limits" in inter and "/ 1 s ttft p99" in inter and "MISSED" not in inter
    assert any(line.startswith("class batch:") and "/ 60 s e2e p90" in line for line in out.splitlines())
    assert main(["simulate", "--plan", str(tmp_path / "plan.yaml"), "--requests", "64"]) == 0
    assert "class interactive:" in capsys.readouterr().out


def test_a_class_target_no_layout_meets_is_no_plan(tmp_path, capsys):
    """1 ms per output token at p99 is below any tiny-moe step on a CPU: no plan (exit 3), naming the class."""
    assert _plan(tmp_path, "0.001") == 3
    assert "no layout" in capsys.readouterr().err
