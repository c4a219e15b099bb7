"""List the embedded models or hardware with their key numbers, each column with its unit (--json: every
field of each spec in its YAML unit, plus the table's derived numbers unrounded).

Link bandwidths are gigabytes per second (GB/s, bytes) per GPU in one direction, as the hardware YAMLs hold
them in B/s: network cards are sold in gigabits (Gb/s), so an 800 Gb/s NIC is 100 GB/s here.
"""
from __future__ import annotations

import json
import sys

from rackplan.specs import available, load_hardware, load_model, to_dict


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true",
                   help="print one JSON list instead of the table: a record per entry, every field of its spec "
                        "(source, host_cpu included) and the table's numbers unrounded")


def add_models_arguments(p) -> None:
    add_arguments(p)
    p.add_argument("--from", dest="from_config", metavar="CONFIG",
                   help="print the model spec built from a Hugging Face config.json (a path, a folder holding one, "
                        "or a repo id in the local Hugging Face cache) as YAML, to save under configs/models/ or "
                        "pass to --model (with --json: as JSON); unsupported fields or architectures are refused "
                        "by name")


def print_from_config(ref: str, as_json: bool = False) -> int:
    """The spec a config.json translates to, as loadable YAML (a header names its source) or JSON."""
    import yaml

    from rackplan.specs import resolve_path
    from rackplan.specs.hf_config import load_config_spec

    path = resolve_path("models", ref)
    if path.suffix != ".json":
        from rackplan.specs import SpecError

        raise SpecError("", "from", "a config.json, a folder holding one or a cached Hugging Face repo id", ref)
    spec = load_config_spec(path)
    if as_json:
        print(json.dumps(_compact(spec), indent=2))
        return 0
    params = spec.param_counts()
    print(f"# {spec.name}: built by rackplan from {path} (rackplan/specs/hf_config.py states each default)\n"
          f"# parameters (analytic, MTP excluded): {sum(params.values()) / 1e9:,.2f}B total\n"
          + yaml.safe_dump(_compact(spec), sort_keys=False, width=120), end="")
    return 0


def _compact(obj):
    """to_dict without the fields left at their defaults (what a hand-written spec omits)."""
    import dataclasses

    if isinstance(obj, float) and obj.is_integer():
        return int(obj)  # 1024 bytes, not 1024.0 (the float fields load ints back as floats)
    if not dataclasses.is_dataclass(obj):
        return [_compact(v) for v in obj] if isinstance(obj, (list, tuple)) else obj
    return {f.name: _compact(getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if f.init and (f.default is dataclasses.MISSING or getattr(obj, f.name) != f.default)}


BANDWIDTH_NOTE = ("GB/s: gigabytes (bytes) per second per GPU, one direction; NICs are sold in gigabits (Gb/s): "
                  "an 800 Gb/s NIC is 100 GB/s here (whatif's hardware.nvlink_gbps / scaleout_gbps take GB/s too)")


def _print(args, title: str, columns: tuple[str, ...], rows: list[tuple[tuple[str, ...], dict]],
           caption: str = "") -> int:
    """The one listing printer: rows as (table cells, JSON record), a rich table or, with --json, the records."""
    if args.json:
        print(json.dumps([record for _, record in rows], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, caption=caption or None)
    for col in columns:
        t.add_column(col)
    for cells, _ in rows:
        t.add_row(*cells)
    Console(width=None if sys.stdout.isatty() else 130).print(t)
    return 0


def run_models(args) -> int:
    if getattr(args, "from_config", None):
        return print_from_config(args.from_config, args.json)
    rows = []
    for name in available("models"):
        m = load_model(name)
        total = sum(m.param_counts().values())
        rows.append(((name, str(m.num_layers), str(m.hidden_size),
                      f"{m.moe.num_experts} / {m.moe.top_k} / {m.moe.num_shared_experts}", m.attention.kind,
                      f"{total / 1e9:,.1f}", f"{m.kv_bytes_per_token:,.0f}"),
                     {**to_dict(m), "name": name, "layers": m.num_layers, "hidden": m.hidden_size,
                      "experts": m.moe.num_experts,
                      "top_k": m.moe.top_k, "shared_experts": m.moe.num_shared_experts,
                      "attention": m.attention.kind, "params": total, "kv_bytes_per_token": m.kv_bytes_per_token}))
    return _print(args, "models (configs/models)", ("name", "layers", "hidden", "experts / top-k / shared",
                                                     "attention", "params (billions)", "KV bytes/token"), rows)


def run_hardware(args) -> int:
    rows = []
    for name in available("hardware"):
        h = load_hardware(name)
        peaks = ", ".join(f"{k} {v / 1e12:,.0f}" for k, v in h.peak_flops.items())
        rows.append(((name, f"{h.hbm_bytes / 1e9:.0f}", f"{h.hbm_bw / 1e12:.2f}", peaks, f"{h.scaleup_bw / 1e9:.0f}",
                      str(h.domain_size), f"{h.scaleout_bw / 1e9:.0f}"),
                     {**to_dict(h), "name": name, "hbm_bytes": h.hbm_bytes, "hbm_bytes_per_s": h.hbm_bw,
                      "peak_flops": dict(h.peak_flops), "scaleup_bytes_per_s": h.scaleup_bw,
                      "domain_size": h.domain_size, "scaleout_bytes_per_s": h.scaleout_bw}))
    return _print(args, "hardware (configs/hardware)", ("name", "HBM GB", "HBM TB/s", "peak TFLOP/s (dense)",
                                                         "NVLink GB/s", "domain GPUs", "scale-out GB/s"), rows,
                  BANDWIDTH_NOTE)


add_hardware_arguments = add_arguments
