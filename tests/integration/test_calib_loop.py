"""Reduced closed loop on this machine: execute a small sweep -> calibrate -> validate (< 60 s)."""
import json
from pathlib import Path

import pytest
from bench_scripts import script

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_quick_loop(tmp_path):
    calibration_loop = script("calibration_loop.py")

    code = calibration_loop.main(["--quick", "--out", str(tmp_path), "--max-mape", "1000"])
    rep = json.loads((tmp_path / "validate.json").read_text())
    assert code == 0
    assert rep["held_out_sizes"]["decode"] == [4]
    assert "step" in rep["gated"]
