"""Does `calibrate --vllm-bench` find a known perturbation? Side by side, per scenario.

A bench JSON in vLLM's schema is simulated with the datasheet profile perturbed (prefill device ops
x1.3, decode x0.8), fitted back from the unperturbed datasheet profile (calibration/bench_fit.py),
and checked on a held-out bench (other requests, same load) before and after. Prints the fitted
values against the truth, identifiability, the held-out errors and CPU time (process_time: the
machine is shared).

  python benchmarks/bench_fit_recovery.py [--requests-h200 400] [--requests-seed 1500]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from rackplan.calibration import bench_fit
from rackplan.calibration.validate import compare_vllm_bench
from rackplan.sim.simulator import with_rate
from rackplan.specs import load_plan, load_profile, load_workload

ROOT = Path(__file__).resolve().parents[1]
TRUE = {"prefill_scale": 1.3, "decode_scale": 0.8}
CASES = {"h200-dsv3-32gpu": ROOT / "tests/data/h200-dsv3-32gpu.yaml",
         "v41-flash-gb300-nvl72": ROOT / "configs/plans/v41-flash-gb300-nvl72.yaml"}


def _bench(plan, prof, requests: int, seed: int, folder: Path):
    wl = load_workload(plan.workload)
    wl = with_rate(wl, 0.5 * (plan.predicted.get("request_rate") or wl.arrival.rate))
    path = folder / f"{plan.name}-{seed}.json"
    path.write_text(json.dumps(bench_fit.simulated_bench(plan, prof, wl, requests, seed)))
    return bench_fit.read_bench(path, plan), wl.arrival.rate


def run_case(name: str, path: Path, requests: int, folder: Path) -> None:
    plan, base = load_plan(path), load_profile("datasheet")
    truth = bench_fit.with_params(base, TRUE)
    fit_bench, rate = _bench(plan, truth, requests, 0, folder)
    held, _ = _bench(plan, truth, requests, 1, folder)
    t0 = time.process_time()
    f = bench_fit.fit(plan, [fit_bench], base, "fitted")
    cpu = time.process_time() - t0
    print(f"\n## {name}: {plan.summary}; {requests} requests at {rate:.3g} req/s (half the planned load)")
    print(f"fit: {f.sims} simulations, {cpu:.1f} s CPU")
    print(f"{'parameter':<22} {'true':>9} {'fitted':>9} {'err %':>7}  identified")
    refs = bench_fit._refs(base)
    for k, v in f.values.items():
        t = TRUE.get(k, refs[k])
        print(f"{k:<22} {t:>9.4g} {v:>9.4g} {100 * (v / t - 1):>+7.2f}  {f.identified[k]}")
    before, after = compare_vllm_bench(plan, held, base), compare_vllm_bench(plan, held, f.profile)
    print(f"held-out bench (seed 1): {'statistic':<16} {'measured s':>10} {'before %':>9} {'after %':>9}")
    for key in sorted(k for k in after if k.endswith("_err")):
        stem = key[:-4]
        print(f"{'':<25}{stem:<16} {after[stem + '_measured_s']:>10.4f} {100 * before[key]:>+9.1f} "
              f"{100 * after[key]:>+9.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests-h200", type=int, default=400)
    ap.add_argument("--requests-seed", type=int, default=1500)
    args = ap.parse_args()
    sizes = {"h200-dsv3-32gpu": args.requests_h200, "v41-flash-gb300-nvl72": args.requests_seed}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in CASES.items():
            run_case(name, path, sizes[name], Path(tmp))


if __name__ == "__main__":
    main()
