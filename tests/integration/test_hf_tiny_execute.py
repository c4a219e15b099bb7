"""`execute --model <tiny config.json folder>`: scaled-down configs of the new families (Qwen3-MoE: GQA,
no shared expert; GLM-4.5: GQA + shared expert + a dense first layer; Kimi K2: MLA, ungrouped routing;
gpt-oss: GQA with sliding / full attention alternating; DeepSeek-V4: compressed + sliding attention,
mHC, hash routing), translated by hf_config and run one step on the tiny-cpu plan's gloo ranks
(tests/data/hf_tiny/: each the family's published config.json with the sizes shrunk, float32 weights
and no quantization block)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rackplan.executor.schema import read_measurements
from rackplan.specs import load_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "hf_tiny"


@pytest.mark.parametrize("name", ["tiny-qwen3-moe", "tiny-glm4-moe", "tiny-kimi-k2", "tiny-gpt-oss",
                                  "tiny-deepseek-v4"])
def test_tiny_config_runs_a_step(name, tmp_path):
    spec = load_model(str(TINY / name))
    assert spec.name == name and spec.dtypes.compute == "fp32"
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", "tiny-cpu", "--device", "cpu",
           "--model", str(TINY / name), "--steps", "1", "--warmup", "0", "--out", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    recs = read_measurements(tmp_path / "measurements.jsonl")
    steps = [r for r in recs if r["op"] == "step"]
    assert {r["role"] for r in steps} == {"prefill", "decode"} and all(r["seconds"] > 0 for r in steps)
    assert {r["model"] for r in recs} == {name}
