"""Held-out MAPE of gemm.fp8_block on the SGLang 0.5.14 SM90 tables (DeepGEMM fp8_gemm_nt, CUDA-graph timed)
at m >= 32, with the configuration DeepGEMM's SM90 heuristic picks per row put into the fit (a measurement, not
wired into the importer: benchmarks/RESULTS.md, 2026-12-02 "DeepGEMM's SM90 configuration in the fp8_block fit").

The rule: DeepGEMM csrc/jit_kernels/heuristics/sm90.hpp (deepseek-ai/DeepGEMM, identical from 7f2a703
2026-04-17 to 54e2261 2026-06-23), SM90ArchSpec::get_layout_candidates (l. 16-118: block_m 64, 128, then 16 at
m <= 16, 32 at m <= 32, 256 for a BF16 output; block_n 16..192 step 16 for the 1D2D kernel; the 1D2D unroll
rule; not both > 128; stages >= 3, >= 4 below 128 x 192; clusters 1x1, 1x2, 2x1), get_pipeline_config
(l. 148-187: the stage count from 232,448 B of shared memory), get_layout_info (l. 201-238: L1/L2 cycles over
the wave efficiency, multicast refused at one wave) and compare (l. 240-243: fewest modelled cycles; common.hpp
get_best_config keeps the first of equals). 132 SMs (H100 / H200 SXM5).

Variants (all through calibration.opdb_fit.fit_class, the importer's seeded split over the m >= 32 rows):
  plain   the shipped form (3 kernel configurations, KERNEL_CONFIGS)
  groups  one curve set per configuration group, as a dispatch range: 1 one CTA per cluster, 2 the same at one
          wave with a tile of >= 128 x 192 (3-4 stages), 3 a 2-CTA cluster (multicast)
  padded  groups, and each curve's pad term the work the chosen tiles do over the useful work
          (ceil(m / block_m) block_m ceil(n / block_n) block_n / (m n)), its weight pad_cost fitted

  .venv/bin/python benchmarks/deepgemm_sm90_fit.py --variant padded [--op-database-root R] h200_sxm h100_sxm
"""
from __future__ import annotations

import argparse
import dataclasses
from functools import lru_cache

import numpy as np

from rackplan.calibration import opdb, opdb_ops
from rackplan.calibration.opdb_fit import fit_class, split
from rackplan.calibration.robust import mape
from rackplan.sim.cost.efficiency import in_ranges
from rackplan.sim.cost.roofline import price
from rackplan.specs import load_hardware, load_profile

HARDWARE = {"h200_sxm": "h200-sxm", "h100_sxm": "h100-sxm"}
SMEM = 232448  # SM90ArchSpec::smem_capacity
BLOCK_K = 128  # 128 / element size (FP8)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _stages(m_blk: int, n_blk: int, k: int) -> int:
    """get_pipeline_config for the 1D2D FP8 kernel with a BF16 output."""
    cd = _cdiv(m_blk * n_blk * 2, 1024) * 1024
    sfb = _cdiv(_cdiv(k, BLOCK_K) * 4 * (1 if BLOCK_K % n_blk == 0 else 2), 8) * 8
    per_stage = m_blk * BLOCK_K + n_blk * BLOCK_K + _cdiv(m_blk * 4, 128) * 128
    return min((SMEM - cd - 16 * 8 * 2 - sfb) // per_stage, 16)


def _cycles(m: int, n: int, k: int, m_blk: int, n_blk: int, cm: int, cn: int, sms: int) -> tuple[int, int]:
    """(modelled cycles, waves) of get_layout_info."""
    blocks = _cdiv(m, m_blk) * _cdiv(n, n_blk)
    waves = _cdiv(blocks, sms)
    l2 = (k * (m_blk // cn + n_blk // cm) + m_blk * n_blk * 2) * blocks // int(min(64.0 * sms, 8e6 / 1.3e3))
    l1 = (k * (m_blk + n_blk) + k * (max(64, m_blk) + n_blk) + m_blk * n_blk * 2 + m_blk * n_blk * 2) * blocks \
        // (128 * sms)
    cycles = int(max(l1, l2) / (blocks / (waves * sms)))
    return (2 ** 63 - 1 if cm * cn > 1 and waves <= 1 else cycles), waves


@lru_cache(maxsize=None)
def sm90_config(m: int, n: int, k: int, sms: int) -> tuple[int, int, int, int]:
    """(block_m, block_n, cluster CTAs, waves) DeepGEMM's SM90 fp8_gemm_nt picks for [m, k] x [k, n] on `sms`
    SMs (HardwareSpec.num_sms: 132 on H100 / H200 SXM5)."""
    block_ms = [64, 128] + ([16] if m <= 16 else []) + ([32] if m <= 32 else []) + [256]
    best = None
    for cm, cn in ((1, 1), (1, 2), (2, 1)):
        for m_blk in block_ms:
            for n_blk in range(16, 193, 16):
                d = n_blk - BLOCK_K
                if d > 0 and n_blk % d and BLOCK_K % d or (m_blk > 128 and n_blk > 128):
                    continue
                st = _stages(m_blk, n_blk, k)
                if st < 3 or (m_blk * n_blk < 128 * 192 and st < 4):
                    continue
                cyc, waves = _cycles(m, n, k, m_blk, n_blk, cm, cn, sms)
                if best is None or cyc < best[0]:
                    best = (cyc, m_blk, n_blk, cm * cn, waves)
    return best[1:]


def group(m: int, n: int, k: int, sms: int) -> float:
    m_blk, n_blk, ctas, waves = sm90_config(m, n, k, sms)
    if ctas > 1:
        return 3.0
    return 2.0 if waves == 1 and m_blk * n_blk >= 128 * 192 else 1.0


def padded(m: int, n: int, k: int, sms: int) -> float:
    m_blk, n_blk, _, _ = sm90_config(m, n, k, sms)
    return _cdiv(m, m_blk) * m_blk * _cdiv(n, n_blk) * n_blk / (m * n)


def _predict(m, n, k, load, pad, hw):
    flops = 2.0 * m * n * k
    peak = hw.flops_for("fp8_block")

    def predict(prof, i):  # efficiency.evaluate_bound's form, its pad term the chosen tiles' padded work
        eff = np.zeros(len(i))
        for c in prof.curves["gemm.fp8_block"]:
            q = c.sharpness
            p = 1.0 + c.pad_cost * (pad[i] - 1.0)
            b = c.y_half / n[i] + c.z_half / k[i]
            e = c.eff_max / ((p ** q + (c.x_half / m[i]) ** q + b ** q) ** (1 / q) + c.work_half / flops[i])
            tiles = np.maximum(np.ceil(m[i] / 128), 1) * np.maximum(np.ceil(n[i] / 128), 1)
            e = e * tiles / (tiles + c.tiles_half) if c.tiles_half else e
            ok = in_ranges(c, m[i], 0.0, load=load[i])
            eff = np.maximum(eff, np.where(ok, e, 0.0))
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
    pad = np.array([padded(*s, hw.num_sms) for s in shapes]) if variant == "padded" else np.ones(len(keep))
    start, free = (dataclasses.replace(rows.start, pad_cost=1.0), rows.free + ("pad_cost",)) if variant == "padded" \
        else (rows.start, rows.free)
    ranges = tuple((g - 1.0, g) for g in sorted(set(load))) if variant != "plain" else ()
    sub = dataclasses.replace(rows, seconds=rows.seconds[keep], predict=_predict(m, n, k, load, pad, hw), start=start,
                              free=free, x=m, y=n, z=k, load=load, load_ranges=ranges)
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
