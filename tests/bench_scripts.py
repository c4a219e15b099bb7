"""The scripts under benchmarks/ as modules, for the tests that call their functions.

benchmarks/ is no package and its scripts are not installed, so a test loads one from its path
(`script("sim_speed.py")`, `script("investigations/moe_tp_check.py")`) instead of putting benchmarks/ on
sys.path. A script is registered under its file name, as a sibling script that imports it names it
(plan_to_hardware.py imports calibration_loop), and loaded once per test session.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def script(rel: str) -> ModuleType:
    """benchmarks/`rel` loaded as a module named after its file (the same module on every call)."""
    path = BENCHMARKS / rel
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"no script {path}"
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # (before it runs: its dataclasses look their module up there)
    spec.loader.exec_module(mod)
    return mod
