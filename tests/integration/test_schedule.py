"""plan --trace --schedule and simulate --schedule on four hours of the shipped diurnal day
(tests/data/azure_conv_diurnal_day.csv, hours 04-07 UTC: the morning rise), DeepSeek-V3 on H200 shapes."""
from pathlib import Path

import pytest

from rackplan.cli import main
from rackplan.sim.search import schedule as sch
from rackplan.specs import from_dict
from rackplan.specs.reading import read_yaml

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data"
BASE = str(DATA / "h200-dsv3-32gpu.yaml")  # prefill DEP8 (8 GPUs), decode DEP16 (16 GPUs)


def morning(tmp_path) -> Path:
    lines = (DATA / "azure_conv_diurnal_day.csv").read_text().splitlines()
    keep = [ln for ln in lines[1:] if ln[11:13] in ("04", "05", "06", "07")]
    out = tmp_path / "morning.csv"
    out.write_text("\n".join([lines[0]] + keep) + "\n")
    return out


def test_schedule_meets_the_slos_in_every_interval_and_saves_gpu_hours(tmp_path, capsys):
    trace, out = morning(tmp_path), tmp_path / "schedule.yaml"
    assert main(["plan", "--trace", str(trace), "--schedule", "1h", "--trace-scale", "2000", "--base-plan", BASE,
                 "--profile", "h200-sxm-vllm", "--interval-requests", "1000", "--out", str(out), "--quiet"]) == 0
    s = from_dict(sch.Schedule, read_yaml(out), str(out))
    assert len(s.intervals) == 4 and all(iv.meets_slo for iv in s.intervals)
    slo = s.base.slo
    assert all(iv.ttft_p90_s <= slo.ttft_p90_s and iv.tpot_p90_s <= slo.tpot_p90_s for iv in s.intervals)
    # the rate rises over the morning: the first hour needs fewer prefill instances than the last
    assert s.intervals[0].rate_rps < s.intervals[-1].rate_rps
    assert s.intervals[0].prefill < max(iv.prefill for iv in s.intervals)
    # GPU-hours by hand: 8 GPUs a prefill instance, 16 a decode one; each added instance starts 600 s early
    run = sum((8 * iv.prefill + 16 * iv.decode) * (iv.end_s - iv.start_s) for iv in s.intervals) / 3600
    starts = sum(8 * max(0, b.prefill - a.prefill) + 16 * max(0, b.decode - a.decode)
                 for a, b in zip(s.intervals, s.intervals[1:])) * 600 / 3600
    peak = 8 * max(iv.prefill for iv in s.intervals) + 16 * max(iv.decode for iv in s.intervals)
    h = sch.gpu_hours(s)
    assert h["schedule"] == pytest.approx(run + starts)
    assert h["static"] == pytest.approx(peak * (s.intervals[-1].end_s - s.intervals[0].start_s) / 3600)
    assert h["saved"] > 0
    assert "GPU-hours" in capsys.readouterr().out
    # the schedule's simulation verifies it over the whole trace (the same seeded probes)
    assert main(["simulate", "--schedule", str(out)]) == 0
    text = capsys.readouterr().out
    assert "verified in" in text and "missed" not in text
