"""One accuracy case simulated over several closed-loop concurrencies, for checking a case's
physics against a source's concurrency curve (e.g. the vLLM GB300 post's aggregated V3.2 TP2 "1pd"
line) rather than a single bar whose concurrency is not published.

Each concurrency replaces the case's `workload.arrival` with {kind: concurrency, concurrency: C}
and runs the real simulator (the case's `num_requests`, or --requests) under the case hardware's
default profile (or --profile), optionally with --override, a JSON mapping of case fields
deep-merged into the case (`model_overrides`, `plan`; named lists such as `attention.kv` item by
item, as case files merge them) for what-if runs the case file does not hold; prints per
concurrency the instance's total tok/s and output tok/s per GPU over the whole run (all tokens /
first arrival to last finish, as `vllm bench serve` reports them), TPOT p50 and TTFT p50.

Run:  python benchmarks/accuracy_sweep.py --case v32-gb300-mixed-tp2 --concurrency 32 64 128 256
      python benchmarks/accuracy_sweep.py --case v32-gb300-mixed-tp4-fp8 --concurrency 512 \
          --override '{"model_overrides": {"attention": {"kv": [{"name": "mla_latent_sparse",
                                                                  "padded_heads": false}]}}}'
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rackplan.accuracy.cases import deep_merge, load_cases, resolve  # noqa: E402
from rackplan.accuracy.predict import rates_per_gpu  # noqa: E402
from rackplan.sim.simulator import simulate_specs  # noqa: E402
from rackplan.specs import Scenario, SpecError, load_hardware, load_profile  # noqa: E402

OVERRIDABLE = ("model_overrides", "plan")


def overridden(case, override: dict):
    """`case` with the `override` mapping's fields (OVERRIDABLE only) deep-merged into its own."""
    bad = sorted(set(override) - set(OVERRIDABLE))
    if bad:
        raise SpecError("--override", bad[0], "one of the case fields " + ", ".join(OVERRIDABLE), bad[0])
    return replace(case, **{k: deep_merge(getattr(case, k), v) for k, v in override.items()})


def sweep(case_id: str, concurrencies: list[int], profile: str | None, requests: int | None, seed: int,
          override: dict | None = None) -> list[dict]:
    """Metrics of `case_id` (with `override` merged in) simulated at each closed-loop concurrency."""
    cases = [c for c in load_cases() if c.id == case_id]
    if not cases or cases[0].method != "simulate":
        raise SpecError("", "--case", "the id of a `simulate` case in benchmarks/cases", case_id)
    case = overridden(cases[0], override or {})
    prof = load_profile(profile or load_hardware(case.hardware).default_profile)
    out = []
    for conc in concurrencies:
        sc = resolve(replace(case, workload={**case.workload, "arrival": {"kind": "concurrency", "concurrency": conc}}),
                     None)
        m = simulate_specs(Scenario(sc.plan, sc.model, sc.hw, sc.workload, prof), requests or case.num_requests,
                           seed).metrics
        rates = rates_per_gpu(m, closed_loop=True)  # over the whole run, as the bench reports it
        out.append({"concurrency": conc, "profile": prof.name, "total_tps": rates["total"] * m["num_gpus"],
                    "output_tps_per_gpu": rates["output"], "tpot_p50_s": m["tpot_p50_s"],
                    "ttft_p50_s": m["ttft_p50_s"]})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="accuracy_sweep.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--case", required=True, help="a simulate case id of benchmarks/cases/*.yaml")
    p.add_argument("--concurrency", type=int, nargs="+", required=True, help="closed-loop concurrencies")
    p.add_argument("--profile", help="profile name or YAML (default: the case hardware's default_profile)")
    p.add_argument("--requests", type=int, help="requests per run (default: the case's num_requests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--override", default="{}", help="JSON mapping of case fields merged into the case (what-if)")
    args = p.parse_args(argv)
    try:
        override = json.loads(args.override)
    except json.JSONDecodeError as exc:
        print(f"error: --override: expected a JSON mapping ({exc})", file=sys.stderr)
        return 2
    if not isinstance(override, dict):
        print("error: --override: expected a JSON mapping of case fields", file=sys.stderr)
        return 2
    try:
        rows = sweep(args.case, args.concurrency, args.profile, args.requests, args.seed, override)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.case} under {rows[0]['profile']}")
    print(f"{'concurrency':>11} {'total tok/s':>12} {'out tok/s/GPU':>14} {'TPOT p50 ms':>12} {'TTFT p50 s':>11}")
    for r in rows:
        print(f"{r['concurrency']:>11} {r['total_tps']:>12,.0f} {r['output_tps_per_gpu']:>14,.0f} "
              f"{r['tpot_p50_s'] * 1e3:>12.1f} {r['ttft_p50_s']:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
