"""The GPU kit's CPU rehearsal runs every stage end to end (tiny shapes, TRITON_INTERPRET=1 for the
kernels) and returns its results within the device call's file limits."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rackplan.executor.gpukit import archive

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
STAGES = ("env", "kernels", "plans", "replay-h100-v3-bf16-dep64", "validate-h100-v3-bf16-dep64",
          "replay-h100-v41-bf16-dep24", "validate-h100-v41-bf16-dep24", "compare")


def _check_out(out: Path, tmp: Path) -> None:
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= archive.MAX_FILES and all((out / f).stat().st_size <= archive.MAX_BYTES for f in files)
    summary = (out / "summary.md").read_text()
    for stage in STAGES:
        assert f"| {stage} | ok" in summary, (stage, summary[:2000])
    res = archive.unpack(out, tmp / "back")
    kinds = {json.loads(line)["kind"] for line in (res / "kernels.jsonl").read_text().splitlines()}
    assert kinds == {"peak", "gemm", "experts", "attention", "floor"}
    bad = [r for r in map(json.loads, (res / "kernels.jsonl").read_text().splitlines())
           if "error" in r or r.get("rel_err_vs_loop", 0) > (0.1 if r.get("dtype") == "fp8" else 1e-3)]
    assert not bad, bad[:3]
    for name in ("h100-v3-bf16-dep64", "h100-v41-bf16-dep24"):
        runs = res / "plans" / "runs" / name / "measurements.jsonl"
        recs = [json.loads(line) for line in runs.read_text().splitlines()]
        # both phases ran; the CPU-speed probe (executor/probe.py, op host.probe, role serve) is recorded beside them
        assert {r["role"] for r in recs if r["op"] != "host.probe"} == {"prefill", "decode"}
        assert any(r["op"] == "host.probe" for r in recs)
        assert json.loads((res / "validate" / f"{name}.json").read_text())["ops"]
    assert "measured / profile" in summary and "launch floor" in summary


def test_rehearsal_end_to_end(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "rackplan.executor.gpukit", "--rehearse", "--out", str(out)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    _check_out(out, tmp_path)


@pytest.mark.slow
def test_run_sh_installs_offline_and_rehearses(tmp_path):
    """run.sh from a wheelhouse holding only the project's own wheel (simpy comes from this environment,
    which has it; the lent machine gets its wheel from benchmarks/gpukit_wheelhouse.py): the kit imports the
    installed package, not the checkout's ./rackplan."""
    whl = tmp_path / "whl"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(whl), str(ROOT)], check=True,
                   capture_output=True)
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "PYTHON": sys.executable, "GPUKIT_WHEELS": str(whl),
           "HOME": str(tmp_path)}
    res = subprocess.run(["bash", str(ROOT / "executor/gpukit/run.sh"), "--rehearse"], capture_output=True,
                         text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:]
    log = (out / "kit.log").read_text()
    assert "gpukit: rackplan from /tmp/gpukit-site." in log
    _check_out(out, tmp_path)
    shutil.rmtree(tmp_path / "back")
