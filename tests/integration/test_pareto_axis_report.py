"""`rackplan plan --report DIR --pareto-axis cost`: pareto.png, pareto.csv and report.md draw the front on
$/M output tokens on the GPU budget; the CSV's on_cost_front column is the front of its own columns."""
from __future__ import annotations

import csv

import pytest

from rackplan.cli import main
from rackplan.specs import resolve_path

pytestmark = pytest.mark.integration


def test_report_draws_the_front_on_cost(tmp_path, capsys):
    hw = tmp_path / "priced.yaml"
    hw.write_text(resolve_path("hardware", "cpu-local").read_text().replace("cores: 2 ", "cores: 8 ")
                  + "power_idle_w: 10.0\npower_loaded_w: 100.0\nprice_per_gpu_hour: 1.0\n")
    args = ["plan", "--model", "tiny-moe", "--hardware", str(hw), "--gpus", "5", "--workload", "tiny-chat",
            "--workers", "1", "--quiet", "--ttft-p90", "1s", "--tpot-p90", "200ms", "--profile", "cpu-local",
            "--profile-any-hardware", "--out", str(tmp_path / "p.yaml"), "--pareto-axis", "cost"]
    assert main(args) == 2  # no --report: nothing to draw on, refused before the search
    assert "--pareto-axis" in capsys.readouterr().err
    assert main(args + ["--report", str(tmp_path / "r")]) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Pareto front on cost" in md and "**$ per M output tokens on the 5-GPU budget**" in md
    assert "$1/GPU-h" in md and (tmp_path / "r" / "pareto.png").stat().st_size > 0
    rows = list(csv.DictReader(open(tmp_path / "r" / "pareto.csv")))
    # the front by hand, within the CSV's 4 significant digits (eps): no other row is clearly faster per user
    # and no dearer than a row on the front (two rows equal in print may differ in the 5th digit of tok/s/user,
    # where the faster one stays on the front however much dearer); a row off it is matched by another
    pts = [(float(r["tps_user"] or r["est_tps_user"]), float(r["usd_per_m_output_budget"])) for r in rows]
    eps = 1e-3

    def covers(q, p):
        return q[0] >= p[0] * (1 - eps) and q[1] <= p[1] * (1 + eps)

    def beats(q, p):
        return q[0] > p[0] * (1 + eps) and q[1] <= p[1] * (1 - eps)
    on = [int(r["on_cost_front"]) for r in rows]
    assert sum(on) >= 1
    # a deployment off the tok/s/GPU front (whose copies fill the budget better) is on the cost front
    assert any(r["on_cost_front"] == "1" and r["on_front"] == "0" for r in rows)
    for i, p in enumerate(pts):
        others = pts[:i] + pts[i + 1:]
        assert not any(beats(q, p) for q in others) if on[i] else any(covers(q, p) for q in others)
