"""Specs: the shared vocabulary (frozen dataclasses) loaded from YAML, by embedded name or by path.

Embedded specs live in `rackplan.configs` (the checkout's configs/ folder)."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import yaml

from .fields import SpecError, from_dict, read_yaml, to_dict
from .hardware import HardwareSpec
from .layout import SLO, EPLBConfig, Layout, Plan, Speculation
from .model import DTYPE_BYTES, AttentionSpec, DraftSpec, Dtypes, KVComponent, ModelSpec, MoESpec
from .profile import A2AParams, Profile
from .workload import Arrival, LengthDist, Workload


def _config_dir() -> Path:
    """The embedded configs: package data of `rackplan.configs` (a checkout's configs/ folder in an
    editable install), unless $RACKPLAN_CONFIGS names another folder."""
    if os.environ.get("RACKPLAN_CONFIGS"):
        return Path(os.environ["RACKPLAN_CONFIGS"])
    from importlib.util import find_spec

    spec = find_spec("rackplan.configs")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("rackplan.configs (the embedded YAML specs) is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


CONFIG_DIR = _config_dir()
KINDS = {
    "models": ModelSpec,
    "hardware": HardwareSpec,
    "plans": Plan,
    "workloads": Workload,
    "profiles": Profile,
}

__all__ = [
    "A2AParams", "Arrival", "AttentionSpec", "CONFIG_DIR", "DTYPE_BYTES", "DraftSpec", "Dtypes",
    "EPLBConfig", "HardwareSpec", "KVComponent", "Layout", "LengthDist", "ModelSpec", "MoESpec",
    "Plan", "Profile", "SLO", "SpecError", "Speculation", "Workload", "available", "load",
    "load_model", "load_hardware", "load_plan", "load_workload", "load_profile", "dump_yaml",
    "plan_hash", "from_dict", "to_dict", "resolve_path",
]


def available(kind: str) -> list[str]:
    """Names of the embedded specs of one kind ('models', 'hardware', ...)."""
    return sorted(p.stem for p in (CONFIG_DIR / kind).glob("*.yaml"))


def resolve_path(kind: str, name_or_path: str | Path) -> Path:
    """A path as given if it exists or looks like a file path, else configs/<kind>/<name>.yaml."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    cand = CONFIG_DIR / kind / f"{name_or_path}.yaml"
    if not cand.exists():
        field = {"models": "model", "hardware": "hardware", "plans": "plan", "workloads": "workload",
                 "profiles": "profile"}[kind]
        raise SpecError("", field, "one of: " + ", ".join(available(kind)), str(name_or_path))
    return cand


def load(kind: str, name_or_path: str | Path):
    """Load and validate one spec of `kind` by embedded name or file path."""
    path = resolve_path(kind, name_or_path)
    return from_dict(KINDS[kind], read_yaml(path), str(path))


def load_model(name: str | Path) -> ModelSpec:
    return load("models", name)


def load_hardware(name: str | Path) -> HardwareSpec:
    return load("hardware", name)


def load_plan(name: str | Path) -> Plan:
    return load("plans", name)


def load_workload(name: str | Path) -> Workload:
    return load("workloads", name)


def load_profile(name: str | Path) -> Profile:
    return load("profiles", name)


def dump_yaml(obj, path: str | Path, header: str = "") -> None:
    """Write a spec atomically (temp file + rename), so a failure never leaves a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = header + yaml.safe_dump(to_dict(obj), sort_keys=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def plan_hash(plan: Plan) -> str:
    """Stable short hash of a plan's content (ties measurements to the plan that made them)."""
    text = yaml.safe_dump(to_dict(plan), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
