"""The GPUStack result blocks transcribed in benchmarks/gpustack_steps.py agree with the case files' figures:
each run's (total input + generated tokens) / benchmark duration / GPUs is the case's published tok/s/GPU."""
import importlib.util
from pathlib import Path

import pytest

from rackplan.accuracy.cases import load_cases

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("gpustack_steps", ROOT / "benchmarks" / "gpustack_steps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_transcribed_runs_reproduce_the_case_figures():
    mod = _script()
    cases = {c.id: c for c in load_cases() if c.group.startswith("gpustack-")}
    assert set(cases) == set(mod.PUBLISHED)
    for cid, case in cases.items():
        gpus = case.plan["num_gpus"]
        # duration is printed to 10 ms: 7.72 s carries +-0.065%, so 0.1% holds every row
        assert mod.published_total_per_gpu(cid, gpus) == pytest.approx(case.published, rel=1e-3), cid


def test_hand_derived_row():
    # gpt-oss TP2, 128 in: (127,755 + 4,000) tokens / 4.18 s / 2 GPUs = 15,760.2 tok/s/GPU (page: 31,517.47 / 2)
    assert _script().published_total_per_gpu("gptoss-h100-tp2-random-128", 2) == pytest.approx(15760.2, abs=0.1)
