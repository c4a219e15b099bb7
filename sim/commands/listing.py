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


add_models_arguments = add_hardware_arguments = add_arguments
