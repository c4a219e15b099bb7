"""Held-out MAPE of gemm.fp8_block on the SGLang 0.5.14 SM90 tables (DeepGEMM fp8_gemm_nt, CUDA-graph timed)
at m >= 32, with the configuration DeepGEMM's SM90 heuristic picks per row put into the fit (a measurement, not
wired into the importer: benchmarks/RESULTS.md, 2026-12-02 "DeepGEMM's SM90 configuration in the fp8_block fit").

The rule: sim/cost/deepgemm.py (DeepGEMM csrc/jit_kernels/heuristics/sm90.hpp, its sources there), which the
importer and the cost model use since sm90wire; the `padded` variant is the form `rackplan calibrate` now fits
for h200 / h100 (its own fit path, opdb_ops._ruled_rows, gives the same figure). 132 SMs (H100 / H200 SXM5).

Variants (all through calibration.opdb_fit.fit_class, the importer's seeded split over the m >= 32 rows, and priced
by the cost model's curve code, efficiency.bind / evaluate_bound, each row's configuration group the load its
curves' ranges hold):
  plain   the shipped form (3 kernel configurations, KERNEL_CONFIGS)
  groups  one curve set per configuration group, as a dispatch range: 1 one CTA per cluster, 2 the same at one
          wave with a tile of >= 128 x 192 (3-4 stages), 3 a 2-CTA cluster (multicast)
  padded  groups, and each curve's pad term the work the chosen tiles do over the useful work
          (ceil(m / block_m) block_m ceil(n / block_n) block_n / (m n)), its weight pad_cost fitted

  .venv/bin/python benchmarks/investigations/deepgemm_sm90_fit.py --variant padded [--op-database-root R]
      h200_sxm h100_sxm
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from rackplan.calibration import opdb, opdb_ops
from rackplan.calibration.opdb_fit import fit_class, split
from rackplan.calibration.robust import mape
from rackplan.sim.cost import efficiency
from rackplan.sim.cost.deepgemm import sm90_group
from rackplan.sim.cost.roofline import price
from rackplan.specs import load_hardware, load_profile

HARDWARE = {"h200_sxm": "h200-sxm", "h100_sxm": "h100-sxm"}


def group(m: int, n: int, k: int, sms: int) -> float:
    return float(sm90_group(m, n, k, sms))


def _predict(m, n, k, load, hw):
    flops = 2.0 * m * n * k
    peak = hw.flops_for("fp8_block")

    def predict(prof, i):  # the cost model's curve code (efficiency.bind / evaluate_bound) at each row's group
        bound = efficiency.bind(prof.curves["gemm.fp8_block"], n[i], k[i], hw.num_sms)
        eff = efficiency.evaluate_bound(bound, m[i], flops[i], load[i])
        return price(flops[i], np.zeros(len(i)), peak, eff, hw, prof)
    return predict


def measure(system: str, variant: str, root=None) -> str:
    hw = load_hardware(HARDWARE[system])
    base = load_profile("h800-deepep")
    prof = dataclasses.replace(base, curves={}, fallbacks={}, fit_error={})
    table = opdb.locate(opdb.data_root(root), system, "sglang")["gemm_perf"]
    rows = [r for r in opdb_ops.gemm_rows({"gemm_perf": table}, hw) if r.key == "gemm.fp8_block"][0]
    keep = np.flatnonzero(rows.x >= 32)
    m, n, k = rows.x[keep], rows.y[keep], rows.z[keep]
    shapes = list(zip(m.astype(int), n.astype(int), k.astype(int)))
    load = np.array([group(*s, hw.num_sms) for s in shapes]) if variant != "plain" else np.ones(len(keep))
    plain = opdb_ops.GEMM_START  # (the importer's rows carry the rule now: this script's own forms start plain)
    # padded: the curves name the rule (Curve.tile_rule), so efficiency prices their pad term by the chosen tiles;
    # the group stays a load range here (the importer's _ruled_rows fits it as rule_group instead)
    start, free = (dataclasses.replace(plain, pad_cost=1.0, tile_rule="deepgemm_sm90"),
                   opdb_ops.ALL_FIELDS + ("pad_cost",)) if variant == "padded" else (plain, opdb_ops.ALL_FIELDS)
    ranges = tuple((g - 1.0, g) for g in sorted(set(load))) if variant != "plain" else ()
    sub = dataclasses.replace(rows, seconds=rows.seconds[keep], predict=_predict(m, n, k, load, hw), start=start,
                              free=free, x=m, y=n, z=k, load=load, load_ranges=ranges, rule="")
    f, fitted = fit_class(sub, prof)
    _, held = split(len(keep))
    pred = sub.predict(fitted, held)
    per = {int(g): round(mape(pred[load[held] == g], sub.seconds[held][load[held] == g]), 2) for g in sorted(set(load))}
    counts = {int(g): int((load == g).sum()) for g in sorted(set(load))}
    return (f"{system} {variant}: {len(keep)} rows (m >= 32), held-out MAPE {f.mape_held:.2f}% (fit {f.mape_fit:.2f}); "
            f"per group held-out {per}, rows {counts}; table roughness {rows.notes['table_roughness_pct']}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", choices=("plain", "groups", "padded"), default="padded")
    ap.add_argument("--op-database-root", default=None,
                    help="aiconfigurator-core's systems/data folder (default: the installed package's)")
    ap.add_argument("systems", nargs="+", choices=sorted(HARDWARE))
    args = ap.parse_args()
    for s in args.systems:
        print(measure(s, args.variant, args.op_database_root), flush=True)


if __name__ == "__main__":
    main()
