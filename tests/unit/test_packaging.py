"""Packaging rules: one import name (`rackplan`), an explicit package list, a lazy CLI table.

The lint rule: no module of the project imports `sim`, `executor`, `calibration` or `configs` as a
top-level name (those folders install as rackplan.sim, ...; a bare import works only inside a
checkout). Relative imports inside a package are fine.
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from rackplan import cli

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"sim", "executor", "calibration", "configs"}
SOURCE_DIRS = ("rackplan", "sim", "executor", "calibration", "configs", "tests", "benchmarks")


def _bare_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [f"{path}:{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in MAPPED]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in MAPPED:
            out.append(f"{path}:{node.lineno}: from {node.module} import ...")
    return out


def test_no_bare_top_level_imports():
    bad = [hit for d in SOURCE_DIRS for p in sorted((ROOT / d).rglob("*.py")) for hit in _bare_imports(p)]
    assert not bad, "use rackplan.<package> imports:\n" + "\n".join(bad)


def test_lint_rule_catches_a_bare_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import sim\nfrom executor.model import Model\nfrom .fit import x\nimport rackplan.sim\n")
    assert [h.split(": ", 1)[1] for h in _bare_imports(f)] == ["import sim", "from executor.model import ..."]


def test_package_list_covers_every_source_folder():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapping = cfg["package-dir"]
    for pkg, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            if "__pycache__" not in rel:
                assert ".".join((pkg,) + rel) in listed, f"{init.parent} is not in [tool.setuptools] packages"
    for folder in ("sim", "executor", "calibration"):
        for py in (ROOT / folder).rglob("*.py"):
            assert (py.parent / "__init__.py").exists(), f"{py.parent} has modules but no __init__.py"


def test_help_imports_no_subcommand():
    code = ("import sys, rackplan.cli as c; c.build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('rackplan.') and m != 'rackplan.cli'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_broken_command_module_is_a_crash_not_a_missing_command(monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "simulate", cli.Command("rackplan.no_such_module", "x"))
    with pytest.raises(ModuleNotFoundError):
        cli.main(["simulate"])


def test_a_calibration_py_in_the_working_directory_changes_nothing(tmp_path):
    (tmp_path / "calibration.py").write_text("raise SystemExit('shadowed')\n")
    (tmp_path / "sim.py").write_text("raise SystemExit('shadowed')\n")
    for cmd in ("calibrate", "validate", "simulate"):
        res = subprocess.run([sys.executable, "-m", "rackplan.cli", cmd, "--help"], cwd=tmp_path,
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert "usage: rackplan " + cmd in res.stdout


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_in_the_table_imports_and_has_help(name, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([name, "--help"])
    assert exc.value.code == 0
    assert f"usage: rackplan {name}" in capsys.readouterr().out


HEAVY = ("scipy", "torch", "triton", "matplotlib", "pandas", "pyarrow", "ray", "rich")


@pytest.mark.parametrize("argv", [
    ["simulate", "--requests", "50", "--json"],
    ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "tiny-chat",
     "--ttft-p90", "1s", "--tpot-p90", "200ms", "--workers", "1", "--sim-requests", "32", "--quiet", "--json"],
])
def test_simulate_and_plan_import_no_heavy_module(argv, tmp_path):
    """scipy (calibration), torch and triton (executor), matplotlib (the plan report's PNG), pandas and
    pyarrow (tables), ray (sweeps) and rich (tables on a terminal) stay out of `simulate` and `plan`
    with --json (without --report): a run, not only --help, in a fresh interpreter."""
    if argv[0] == "plan":
        argv = argv + ["--out", str(tmp_path / "plan.yaml")]
    code = (f"import sys, io, contextlib; from rackplan.cli import main; buf = io.StringIO()\n"
            f"with contextlib.redirect_stdout(buf): rc = main({argv!r})\n"
            f"print(rc, sorted(m for m in {HEAVY!r} if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split(None, 1) == ["0", "[]\n"], res.stdout
