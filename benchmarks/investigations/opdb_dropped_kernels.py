"""The MoE rows the op-database importer leaves out, priced by the curve it keeps.

    python benchmarks/investigations/opdb_dropped_kernels.py --op-database-root $R [--system h200_sxm
        --hardware h200-sxm --profile h200-sxm-vllm]

calibration/opdb_ops.expert_rows fits each experts.<dtype> class on one kernel_source of the moe_perf table (the
one with most rows). Where a table holds other kernels (Triton at EP 1 on Hopper, FlashInfer CUTLASS or TRT-LLM
modular rows of other models on Blackwell), this prints how the committed profile prices each kernel's rows:
predicted / measured (median, p10, p90) and the MAPE over every row, kept kernel and dropped ones side by side.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from rackplan.calibration import opdb, opdb_ops
from rackplan.specs import load_hardware, load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from opdb_stability import system_parser  # noqa: E402


def main() -> None:
    p = system_parser(__doc__, "h200_sxm", "h200-sxm", "h200-sxm-vllm", "the committed profile that prices the rows")
    a = p.parse_args()
    table = opdb.locate(opdb.data_root(a.op_database_root), a.system)["moe_perf"]
    hw, prof = load_hardware(a.hardware), load_profile(a.profile)
    kernels = sorted(set(opdb.read(table)["kernel_source"].astype(str)))
    kept = {(c.key, c.kernel) for c in opdb_ops.expert_rows({"moe_perf": table}, hw)}  # what calibrate fits
    print(f"{a.system} moe_perf ({table.version}) priced by {a.profile}")
    print("| class | kernel | kept? | rows | median | p10 | p90 | MAPE |\n|---|---|---|---|---|---|---|---|")
    for k in kernels:
        def pick(values, k=k):
            return k if k in set(values.astype(str)) else opdb.most_rows(values)
        for cr in opdb_ops.expert_rows({"moe_perf": table}, hw, pick):
            if cr.kernel != k:
                continue
            r = cr.predict(prof, np.arange(len(cr.seconds))) / cr.seconds  # predicted / measured [N]
            state = "kept" if (cr.key, k) in kept else "dropped"
            print(f"| {cr.key} | {k} | {state} | {len(r)} | {np.median(r):.3f} | "
                  f"{np.percentile(r, 10):.3f} | {np.percentile(r, 90):.3f} | {np.mean(np.abs(r - 1)) * 100:.1f}% |")


if __name__ == "__main__":
    main()
