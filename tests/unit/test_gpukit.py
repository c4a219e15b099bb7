"""The GPU kit's pieces: replay plans that pass execute's own checks on H100 and H200, the returned-file
limits of the archive, the refusal without CUDA."""
import argparse
import subprocess
import sys

import pytest
import torch

from rackplan.executor.command import add_arguments, check_plan
from rackplan.executor.gpukit import archive, plans
from rackplan.specs import SpecError, load_model, load_plan

pytestmark = pytest.mark.unit


def _execute_args(argv):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(argv)


@pytest.mark.parametrize("hw", ["h100-sxm", "h200-sxm"])
def test_every_planned_replay_passes_execute_checks(hw, tmp_path):
    replays, refused = plans.plan_replays(hw, tmp_path)
    assert [r.name.split("-")[1] for r in replays] == ["v3", "v41"]
    for r in replays:
        check_plan(_execute_args(list(r.args)))  # raises SpecError on a refusal
        plan = load_plan(r.plan)
        model = load_model(plan.model)
        assert plan.hardware == hw and model.name.endswith("-bf16")  # what the replay runs, recorded as such
        assert model.moe.num_experts % r.dep == 0
        assert set(vars(model.dtypes).values()) <= {"bf16", None}
        assert list(r.args[r.args.index("--max-dense-layers"):][:4]) == list(plans.LAYERS)
    assert refused and all("HBM" in line for line in refused)  # the smaller DEP sizes do not fit


def test_h200_replays_smaller_dep_than_h100(tmp_path):
    """Hand-derived: V3 in bf16 is ~1.34 TB of weights; 80 GB per H100 needs DEP >= 17 before KV and the
    replicated attention, so the smallest divisor of 256 that fits is larger than on a 141 GB H200."""
    h100, _ = plans.plan_replays("h100-sxm", tmp_path / "a")
    h200, _ = plans.plan_replays("h200-sxm", tmp_path / "b")
    assert h100[0].dep > h200[0].dep >= 16


def test_shipped_replay_plans_are_refused_on_one_gpu():
    """The plans the old gpu_check.sh replayed fail execute's HBM check: why the kit plans its own."""
    with pytest.raises(SpecError, match="HBM"):
        check_plan(_execute_args(["--plan", "v3-replay-dep8", "--out", "/tmp/unused-gpukit-out"]))


def test_rehearsal_plans_keep_the_dep_and_shrink_the_step(tmp_path):
    real, _ = plans.plan_replays("h100-sxm", tmp_path / "real")
    tiny, _ = plans.plan_replays("h100-sxm", tmp_path / "tiny", device="cpu", rehearse=True)
    assert [r.dep for r in real] == [r.dep for r in tiny]
    for r in tiny:
        plan = load_plan(r.plan)
        assert plan.prefill[0].max_tokens_per_step == plans.REHEARSAL["tokens"]
        assert load_model(plan.model).hidden_size == load_model("tiny-moe").hidden_size


def test_archive_splits_within_the_file_limits(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    (res / "big.bin").write_bytes(torch.randint(0, 256, (50_000,), dtype=torch.uint8).numpy().tobytes())
    (res / "note.txt").write_text("hello")
    out = tmp_path / "out"
    out.mkdir()
    (out / "kit.log").write_text("log")
    written = archive.pack(res, out, "# summary", max_files=8, max_bytes=16_000)
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).stat().st_size <= 16_000 for f in files)
    assert "summary.md" in files and "kit.log" in files and len(written) == len(files) - 1
    back = archive.unpack(out, tmp_path / "back")
    assert (back / "big.bin").read_bytes() == (res / "big.bin").read_bytes()
    assert (back / "note.txt").read_text() == "hello"
    with pytest.raises(archive.TooLarge):
        archive.pack(res, out, "# summary", max_files=3, max_bytes=16_000)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where CUDA is absent")
def test_kit_refuses_without_cuda(tmp_path):
    res = subprocess.run([sys.executable, "-m", "rackplan.executor.gpukit", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert res.returncode == 3
    assert "no CUDA device" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
