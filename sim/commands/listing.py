"""List the embedded models or hardware with their key numbers (--json: every field of each spec)."""
from __future__ import annotations

import json
import sys

from rackplan.specs import available, load_hardware, load_model, to_dict


def _print_json(specs) -> int:
    """Each spec as its YAML fields (HardwareSpec.host_cpu and the specs' source included)."""
    print(json.dumps([to_dict(s) for s in specs], indent=2))
    return 0


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def run_models(args) -> int:
    if args.json:
        return _print_json(load_model(name) for name in available("models"))
    from rich.console import Console
    from rich.table import Table

    t = Table(title="models (configs/models)")
    for col in ("name", "layers", "hidden", "experts / top-k / shared", "attention", "params (B)", "KV B/token"):
        t.add_column(col)
    for name in available("models"):
        m = load_model(name)
        total = sum(m.param_counts().values()) / 1e9
        t.add_row(name, str(m.num_layers), str(m.hidden_size),
                  f"{m.moe.num_experts} / {m.moe.top_k} / {m.moe.num_shared_experts}", m.attention.kind,
                  f"{total:,.1f}", f"{m.kv_bytes_per_token:,.0f}")
    Console(width=None if sys.stdout.isatty() else 130).print(t)
    return 0


def run_hardware(args) -> int:
    if args.json:
        return _print_json(load_hardware(name) for name in available("hardware"))
    from rich.console import Console
    from rich.table import Table

    t = Table(title="hardware (configs/hardware)")
    for col in ("name", "HBM GB", "HBM TB/s", "peak TFLOP/s", "NVLink GB/s", "domain", "scale-out GB/s"):
        t.add_column(col)
    for name in available("hardware"):
        h = load_hardware(name)
        peaks = ", ".join(f"{k} {v / 1e12:,.0f}" for k, v in h.peak_flops.items())
        t.add_row(name, f"{h.hbm_bytes / 1e9:.0f}", f"{h.hbm_bw / 1e12:.2f}", peaks, f"{h.scaleup_bw / 1e9:.0f}",
                  str(h.domain_size), f"{h.scaleout_bw / 1e9:.0f}")
    Console(width=None if sys.stdout.isatty() else 130).print(t)
    return 0


add_models_arguments = add_hardware_arguments = add_arguments
