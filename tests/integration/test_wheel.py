"""The built wheel installs anywhere: configs and data ship inside it, `rackplan` runs outside the
checkout, and only the `rackplan` import name exists (no top-level `sim`).

The fresh venv reuses this environment's installed dependencies (torch's CPU wheel, numpy, ..., and pip)
through a .pth file, so the test installs only the wheel itself.
"""
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(ROOT)],
                   check=True, capture_output=True)
    (whl,) = (tmp / "dist").glob("rackplan-*.whl")
    # no pip of its own (ensurepip is most of this fixture's time): the venv runs the pip it sees through
    # the .pth below, which installs into the venv (sys.prefix), console script included
    venv.create(tmp / "venv", with_pip=False)
    py = tmp / "venv" / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # every site-packages folder this interpreter sees (a venv may chain to another through a .pth)
    deps = [p for p in sys.path if p.rstrip("/").endswith("site-packages")] or [sysconfig.get_paths()["purelib"]]
    (Path(site) / "rackplan_test_deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(whl)], check=True,
                   capture_output=True)
    work = tmp / "elsewhere"
    work.mkdir()
    return whl, tmp / "venv" / "bin", work


def test_wheel_holds_configs_and_data(wheel_env):
    whl, _, _ = wheel_env
    names = zipfile.ZipFile(whl).namelist()
    assert "rackplan/configs/models/deepseek-v4.1-flash.yaml" in names
    assert "rackplan/configs/plans/v41-flash-gb300-nvl72.yaml" in names
    assert "rackplan/calibration/data/deepep_h800_a2a.csv" in names
    assert "rackplan/deploy/vllm_flags.txt" in names  # the kept vLLM flag list the launch files are checked against
    assert "rackplan/data/accuracy_bands.yaml" in names  # the error bands every headline carries
    assert not [n for n in names if n.split("/")[0] in ("sim", "executor", "calibration", "configs")]


def test_installed_wheel_runs_outside_the_checkout(wheel_env):
    _, bin_dir, work = wheel_env
    models = subprocess.run([str(bin_dir / "rackplan"), "models"], cwd=work, capture_output=True, text=True)
    assert models.returncode == 0, models.stderr
    assert "deepseek-v4.1-flash" in models.stdout
    sim = subprocess.run([str(bin_dir / "rackplan"), "simulate", "--requests", "200", "--json"], cwd=work,
                         capture_output=True, text=True)
    assert sim.returncode == 0, sim.stderr
    assert '"plan": "v41-flash-gb300-nvl72"' in sim.stdout
    bare = subprocess.run([str(bin_dir / "python"), "-c", "import sim"], cwd=work, capture_output=True, text=True)
    assert bare.returncode != 0 and "No module named 'sim'" in bare.stderr
    where = subprocess.run([str(bin_dir / "python"), "-c", "import rackplan.sim, rackplan.specs as s; "
                            "print(rackplan.sim.__file__); print(s.CONFIG_DIR)"], cwd=work, capture_output=True,
                           text=True, check=True).stdout
    assert str(ROOT) not in where
