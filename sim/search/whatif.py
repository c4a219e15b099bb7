"""What-if studies: change hardware, CPU overhead, model or profile fields, simulate every
combination of the changes (or re-plan each), and compare with the unchanged baseline.

Keys (`--set KEY=V1,V2,...`):
  hardware.<field>        any HardwareSpec number; nvlink_gbps / scaleout_gbps in GB/s
  cpu.overhead_scale      multiplies the profile's cpu_step_s, cpu_per_request_s and launch_s
  model.<dotted.field>    e.g. model.moe.top_k, model.hidden_size
  profile.<field>         any Profile number, e.g. profile.mem_eff
  workload.<dotted.field> e.g. workload.prefix_hit_rate
Specs are frozen: each change is a dataclasses.replace, so every __post_init__ check applies.
"""
from __future__ import annotations

import dataclasses
import itertools
import typing
from dataclasses import dataclass

from rackplan.specs import HardwareSpec, ModelSpec, Plan, Profile, SpecError, Workload
from rackplan.specs.fields import convert
from rackplan.specs.reading import number

ALIASES = {  # friendly key -> (field, factor to the field's unit)
    "hardware.nvlink_gbps": ("hardware.scaleup_bw", 1e9),
    "hardware.scaleout_gbps": ("hardware.scaleout_bw", 1e9),
    "hardware.hbm_tbps": ("hardware.hbm_bw", 1e12),
}
CPU_FIELDS = ("cpu_step_s", "cpu_per_request_s", "launch_s")
METRICS = ("ttft_p90_s", "tpot_p90_s", "output_tps_per_gpu", "tps_per_user", "request_rate")


@dataclass(frozen=True)
class Specs:
    """The spec objects one simulation uses."""

    model: ModelSpec
    hw: HardwareSpec
    profile: Profile
    workload: Workload


def parse_value(text: str):
    """'4' -> 4, '0.5' -> 0.5, '1e9' -> 1e9, 'true' -> True, else the string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text.strip()


def parse_set(text: str) -> tuple[str, list]:
    """'model.moe.top_k=4,6,8' -> ('model.moe.top_k', [4, 6, 8])."""
    key, sep, values = text.partition("=")
    if not sep or not key.strip() or not values.strip() or any(not v.strip() for v in values.split(",")):
        raise SpecError("--set", key.strip() or text, "KEY=V1[,V2...] with no empty value", text)
    return key.strip(), [parse_value(v) for v in values.split(",")]


def _replace_path(obj, path: list[str], value, key: str):
    """Replace the dotted field `path` inside nested frozen dataclasses."""
    names = [f.name for f in dataclasses.fields(obj)]
    if path[0] not in names:
        raise SpecError("--set", key, "a known field: " + ", ".join(names))
    if len(path) == 1:
        old = getattr(obj, path[0])
        if type(old) is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        hint = typing.get_type_hints(type(obj))[path[0]]
        return dataclasses.replace(obj, **{path[0]: convert(hint, value, "--set", key)})  # typed like YAML
    inner = getattr(obj, path[0])
    if not dataclasses.is_dataclass(inner):
        raise SpecError("--set", key, f"a nested field of {path[0]}")
    return dataclasses.replace(obj, **{path[0]: _replace_path(inner, path[1:], value, key)})


def apply(specs: Specs, key: str, value) -> Specs:
    """The specs with one change; unknown keys and out-of-range values are SpecErrors."""
    if key in ALIASES:
        field, factor = ALIASES[key]
        return apply(specs, field, number(value, "--set", key, lo=0, lo_open=True) * factor)
    root, _, rest = key.partition(".")
    if root == "cpu":
        if rest != "overhead_scale":
            raise SpecError("--set", key, "cpu.overhead_scale")
        scale = number(value, "--set", key, lo=0)
        prof = dataclasses.replace(specs.profile, **{f: getattr(specs.profile, f) * scale for f in CPU_FIELDS})
        return dataclasses.replace(specs, profile=prof)
    attr = {"hardware": "hw", "model": "model", "profile": "profile", "workload": "workload"}.get(root)
    if attr is None or not rest:
        raise SpecError("--set", key, "a key under hardware., cpu., model., profile. or workload. "
                        "(e.g. hardware.nvlink_gbps, cpu.overhead_scale, model.moe.top_k)")
    try:
        changed = _replace_path(getattr(specs, attr), rest.split("."), value, key)
    except SpecError as exc:
        if exc.where == "--set":
            raise
        raise SpecError("--set", key, exc.expected, value) from None
    return dataclasses.replace(specs, **{attr: changed})


def combinations(sets: list[tuple[str, list]]) -> list[tuple[tuple[str, object], ...]]:
    """Every combination of the --set values, in the order given."""
    keys = [k for k, _ in sets]
    return [tuple(zip(keys, vals, strict=False)) for vals in itertools.product(*[v for _, v in sets])]


def changed_specs(base: Specs, combo) -> Specs:
    out = base
    for key, value in combo:
        out = apply(out, key, value)
    return out


def label(combo) -> str:
    return ", ".join(f"{k}={v}" for k, v in combo) or "baseline"


def deltas(metrics: dict, baseline: dict) -> dict[str, float]:
    """Relative change of each metric against the baseline (0.1 = +10%)."""
    out = {}
    for m in METRICS:
        b, v = baseline.get(m), metrics.get(m)
        if b is not None and v is not None and b != 0:
            out[m] = v / b - 1.0
    return out


@dataclass
class Row:
    combo: tuple
    metrics: dict
    plan: Plan | None = None  # the re-planned plan (--replan)

    @property
    def label(self) -> str:
        return label(self.combo)
