"""Specs: the shared vocabulary (frozen dataclasses) loaded from YAML, by embedded name or by path.

Embedded specs live in `rackplan.configs` (the checkout's configs/ folder)."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import yaml

from .fields import SpecError, from_dict, to_dict
from .hardware import HardwareSpec
from .layout import SLO, EPLBConfig, Layout, Plan, PlanInstance, Speculation
from .model import (
    DTYPE_BYTES,
    AttentionSpec,
    DraftSpec,
    Dtypes,
    KVComponent,
    ModelSpec,
    MoESpec,
    split_checkpoint,
    with_checkpoint,
)
from .profile import A2AParams, Curve, HostParams, Profile, check_hardware
from .reading import read_yaml
from .scenario import Scenario
from .workload import Arrival, ChatTemplate, LengthDist, Workload, sample_lengths


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
    "A2AParams", "Arrival", "Curve", "check_hardware", "resolve_profile", "profile_origin",
    "AttentionSpec", "CONFIG_DIR", "DTYPE_BYTES", "DraftSpec", "Dtypes",
    "EPLBConfig", "HardwareSpec", "HostParams", "KVComponent", "Layout", "LengthDist", "ModelSpec", "MoESpec",
    "Plan", "PlanInstance", "Scenario", "Profile", "SLO", "SpecError", "Speculation", "Workload", "ChatTemplate",
    "available", "load",
    "load_model", "load_hardware", "load_plan", "load_workload", "load_profile", "dump_yaml", "pool_hardware",
    "plan_hash", "from_dict", "to_dict", "resolve_path", "sample_lengths", "spec_ref",
]


def available(kind: str) -> list[str]:
    """Names of the embedded specs of one kind ('models', 'hardware', ...)."""
    return sorted(p.stem for p in (CONFIG_DIR / kind).glob("*.yaml"))


def resolve_path(kind: str, name_or_path: str | Path) -> Path:
    """A path as given if it exists or looks like a file path, else configs/<kind>/<name>.yaml; a model
    may also be a Hugging Face config.json, a folder holding one or a cached repo id (hf_config.py)."""
    if kind == "models" and Path(name_or_path).suffix not in (".yaml", ".yml"):
        from .hf_config import config_file

        found = config_file(name_or_path)
        if found is not None:
            return found
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    cand = CONFIG_DIR / kind / f"{name_or_path}.yaml"
    if not cand.exists():
        field = {"models": "model", "hardware": "hardware", "plans": "plan", "workloads": "workload",
                 "profiles": "profile"}[kind]
        raise SpecError("", field, "one of: " + ", ".join(available(kind)), str(name_or_path))
    return cand


def spec_ref(kind: str, name_or_path: str | Path) -> str:
    """How a written file (plan.yaml) names a spec it was made from: an embedded name as given, a
    file path made absolute, so the plan reads back from any folder (a path relative to the folder it
    was planned in named no file anywhere else, its own folder included); a model folder or cached
    repo id as the absolute path of the config.json it resolved to (the snapshot planned with); a
    model's checkpoint format (`<model>:<format>`, model.CHECKPOINTS) kept."""
    fmt = None
    if kind == "models":
        name_or_path, fmt = split_checkpoint(str(name_or_path))
    path = resolve_path(kind, name_or_path)
    ref = str(path.resolve()) if path == Path(name_or_path) or path.suffix == ".json" else str(name_or_path)
    return ref if fmt is None else f"{ref}:{fmt}"


def load(kind: str, name_or_path: str | Path):
    """Load and validate one spec of `kind` by embedded name or file path."""
    path = resolve_path(kind, name_or_path)
    if kind == "models" and path.suffix == ".json":
        from .hf_config import load_config_spec

        return load_config_spec(path)
    shipped = path.parent.parent == CONFIG_DIR and not os.environ.get("RACKPLAN_CONFIGS")  # the package's own
    spec = from_dict(KINDS[kind], read_yaml(path, shipped), str(path))
    if kind == "profiles":
        _check_a2a_coverage(spec, str(path))
    if kind == "workloads":
        _check_trace_is_read(spec, str(path))
    return spec


def _check_trace_is_read(wl: Workload, where: str) -> None:
    """A workload file's `trace` must feed its arrivals or lengths; read nowhere it would do nothing.
    Checked on load, not in Workload.__post_init__: the planner's verification (sim/search/verify.py)
    and the bench fit replace a trace workload's arrival in-process and keep its trace lengths."""
    if wl.trace is not None and "trace" not in (wl.arrival.kind, wl.isl.kind, wl.osl.kind):
        raise SpecError(where, "trace", "unset unless arrival, isl or osl has kind trace (none reads it)",
                        wl.trace)


def _check_a2a_coverage(prof: Profile, where: str) -> None:
    """A profile prices every all-to-all the simulator may run: each kernel over each link."""
    have = {(a.kernel, a.link) for a in prof.a2a}
    for kernel in ("low_latency", "high_throughput"):
        for link in ("nvlink", "scaleout"):
            if (kernel, link) not in have:
                raise SpecError(where, "a2a", f"an entry for kernel {kernel} over link {link} (every "
                                "kernel x link pair)", sorted(have) or "none")


def load_model(name: str | Path) -> ModelSpec:
    """A model by embedded name or file path, `<model>:<format>` for a published checkpoint format
    (model.CHECKPOINTS: `deepseek-v3:nvfp4`, NVIDIA's NVFP4 checkpoint, attention and dense weights BF16)."""
    base, fmt = split_checkpoint(str(name))
    model = load("models", base)
    return model if fmt is None else with_checkpoint(model, fmt)


def load_hardware(name: str | Path) -> HardwareSpec:
    return load("hardware", name)


def load_plan(name: str | Path) -> Plan:
    return load("plans", name)


def pool_hardware(plan: Plan, hw: HardwareSpec, pool: str) -> HardwareSpec:
    """The hardware one pool ("prefill", "decode", "aggregated") of `plan` runs on: `hw` (the plan's
    `hardware`), or for the prefill pool of a mixed plan its `prefill_hardware` (sim/mixed.py)."""
    return load_hardware(plan.prefill_hardware) if pool == "prefill" and plan.prefill_hardware else hw


def load_workload(name: str | Path) -> Workload:
    return load("workloads", name)


def load_profile(name: str | Path) -> Profile:
    return load("profiles", name)


def resolve_profile(explicit: str | Path | None, plan_profile: str | None, hardware: str | HardwareSpec,
                    any_hardware: bool = False) -> Profile:
    """The profile that prices `hardware`: the one named on the command line, else the plan's, else
    the hardware's `default_profile`; a profile fitted on other hardware is a SpecError naming both
    unless `any_hardware` (--profile-any-hardware)."""
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)
    prof = load_profile(explicit or plan_profile or hw.default_profile)
    check_hardware(prof, hw.name, any_hardware)
    return prof


def profile_origin(explicit, plan_profile, hardware: str) -> str:
    """Why resolve_profile chose its profile, in words for a report header."""
    if explicit:
        return "from --profile"
    return "the plan's" if plan_profile else f"default for {hardware}"


class _FlowLeaves(yaml.SafeDumper):
    """Mappings of scalars on one line ({eff_max: 0.8, x_half: 290}): small, readable profiles."""


def _represent_dict(dumper, data):
    leaf = all(not isinstance(v, (dict, list, tuple)) and not (isinstance(v, str) and len(v) > 24)
               for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=leaf and 0 < len(data) <= 8)


_FlowLeaves.add_representer(dict, _represent_dict)


def dump_yaml(obj, path: str | Path, header: str = "", flow_leaves: bool = False) -> None:
    """Write a spec atomically (temp file + rename), so a failure never leaves a partial file.
    `flow_leaves` writes small mappings of scalars on one line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dumper = _FlowLeaves if flow_leaves else yaml.SafeDumper
    text = header + yaml.dump(to_dict(obj), Dumper=dumper, sort_keys=False, width=120)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    from rackplan.outputs import umask_mode
    os.fchmod(fd, umask_mode())  # mkstemp's 0600 would survive the rename
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
