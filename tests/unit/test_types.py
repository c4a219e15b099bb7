"""mypy is clean on the typed packages (pyproject.toml [tool.mypy] `files`: the specs and the step cost
model), so CI, which runs only the README's test command, fails on a type error there. Skips, saying why,
where mypy is not installed (it is in the `dev` extra)."""
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.slow]  # a cold mypy run: ~10-35 s on the 2-core VM
ROOT = Path(__file__).resolve().parents[2]
TYPED = {"rackplan/specs", "sim/cost"}  # the packages CI holds to mypy (issue 38)


def test_the_typed_packages_are_the_ones_mypy_checks():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    files = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"])
    assert TYPED <= files, f"pyproject.toml [tool.mypy] files lacks {sorted(TYPED - files)}"


def test_mypy_is_clean_on_the_typed_packages(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]')")
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                          "--cache-dir", str(tmp_path / "cache")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout
