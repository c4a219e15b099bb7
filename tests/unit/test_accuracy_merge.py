"""benchmarks helpers of the accuracy benchmark: model_overrides merging (accuracy_cases.deep_merge), the sweep CLI."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from accuracy_cases import deep_merge  # noqa: E402

pytestmark = pytest.mark.unit


def test_named_list_items_merge_by_name():
    base = {"attention": {"kind": "mla", "kv": [{"name": "a", "topk": 2048}, {"name": "b", "topk": 512}]}}
    out = deep_merge(base, {"attention": {"kv": [{"name": "b", "scans_full_topk": True}]}})
    assert out["attention"]["kv"] == [{"name": "a", "topk": 2048}, {"name": "b", "topk": 512, "scans_full_topk": True}]
    assert out["attention"]["kind"] == "mla" and base["attention"]["kv"][1] == {"name": "b", "topk": 512}


def test_other_lists_are_replaced():
    assert deep_merge({"x": [1, 2], "y": {"z": 1}}, {"x": [3]}) == {"x": [3], "y": {"z": 1}}


def test_sweep_rejects_an_unknown_case(capsys):
    import accuracy_sweep

    assert accuracy_sweep.main(["--case", "no-such-case", "--concurrency", "1"]) == 2
    assert "--case" in capsys.readouterr().err
