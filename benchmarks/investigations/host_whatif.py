"""The engine's CPU-overhead fixes on the seed scenario: where host work is exposed, and each knob.

1. The seed plan's decode step (DEP64 on GB300, measured gb300-nvl72-vllm profile, the workload's
   mean context) over the batch per rank: device seconds, host work (every part), what the step
   exposes with async scheduling (the plan's setting) and without, and the API server's time.
2. `rackplan whatif` rows, one knob at a time against the unchanged plan, simulated at the plan's
   load: TTFT/TPOT p90, tokens/s per GPU and per user, and the decode step's split (device,
   exposed host, API-server wait; all host work and the API server's busy time beside it) at
   --decode-batch; then every other knob again on top of synchronous scheduling, where host work
   is exposed (a markdown table for RESULTS.md, the change against that row's own base).
   Writes whatif.csv, whatif.png (changes), whatif_step.png (stacked split) and host_whatif.png
   (both, one row per setting) to --out.

    python benchmarks/investigations/host_whatif.py --out runs/host_whatif [--decode-batch 128]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

from rackplan.sim.search import whatif
from rackplan.sim.search.whatif_command import baseline_specs, study, table, write_outputs
from rackplan.specs import Scenario, load_plan

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SYNC = ("host.async_scheduling", [False])
KNOBS = [  # one study each; the baseline is the plan as written (async scheduling, CUDA graphs, vLLM defaults)
    SYNC,
    ("host.scheduler_scale", [0.5]),
    ("host.prepare_scale", [0.0]),
    ("host.api_servers", [1, 4]),
    ("host.stream_interval", [10, 50]),
    ("host.cuda_graphs", [False]),
    ("cpu.overhead_scale", [0.5, 2.0]),
]


def exposure(base: Scenario, plan) -> None:
    sync = whatif.apply(base, "host.async_scheduling", False)
    print(f"{'batch/rank':>10s} {'GPU ms':>8s} {'host ms':>8s} {'host/GPU':>8s} {'exposed async':>13s} "
          f"{'exposed sync':>12s} {'API ms':>7s}")
    for b in BATCHES:
        a, s = whatif.step_split(base, plan, b), whatif.step_split(sync, sync.plan, b)
        host = _host_total(base, plan, b)
        print(f"{b:10d} {a['gpu_ms']:8.2f} {host:8.2f} {host / a['gpu_ms']:8.2f} {a['host_exposed_ms']:13.2f} "
              f"{s['host_exposed_ms']:12.2f} {_api(base, plan, b):7.2f}")


def _cost(specs: Scenario, plan, b: int):
    from rackplan.sim.cost.step import CostContext, decode_step
    from rackplan.sim.search.estimate import traffic_of

    tr = traffic_of(specs.workload, specs.model)
    return decode_step(CostContext(specs.model, specs.hw, plan.decode[0], specs.profile, tr.skew), b, b * tr.ctx_mean)


def _host_total(specs, plan, b: int) -> float:
    return _cost(specs, plan, b).host.total_s * 1e3


def _api(specs, plan, b: int) -> float:
    return _cost(specs, plan, b).host.api_s * 1e3


def _base_of(r: whatif.Row, baseline: whatif.Row, sync: whatif.Row) -> whatif.Row:
    return sync if len(r.combo) > 1 and r.combo[0] == ("host.async_scheduling", False) else baseline


def chart(path: Path, baseline: whatif.Row, rows: list[whatif.Row], sync: whatif.Row) -> None:
    """Horizontal bars, one row per setting: the decode step's split (GPU, exposed host, API-server
    wait; API-server busy time as a tick) and the output tokens/s per GPU change against its base."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [baseline] + rows
    y = list(range(len(rows)))[::-1]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 0.32 * len(rows) + 1.5), dpi=110, sharey=True,
                               gridspec_kw={"width_ratios": [3, 2]})
    left = [0.0] * len(rows)
    for key, label in zip(whatif.SPLIT, ("GPU", "exposed host", "API-server wait")):
        vals = [r.metrics[key] for r in rows]
        a.barh(y, vals, 0.7, left=left, label=label)
        left = [x + v for x, v in zip(left, vals)]
    a.scatter([r.metrics["api_server_ms"] for r in rows], y, marker="|", s=120, c="k", label="API server busy")
    a.set_yticks(y)
    a.set_yticklabels([r.label.replace("host.async_scheduling=False, ", "sync + ") or "baseline (plan)"
                       for r in rows], fontsize=7)
    a.set_xlabel(f"decode step at {baseline.metrics['decode_batch']:.0f} seqs/rank (ms)")
    a.legend(fontsize=7, loc="lower right")
    d = [0.0 if r is baseline else 100 * whatif.deltas(r.metrics, _base_of(r, baseline, sync).metrics)
         .get("output_tps_per_gpu", 0.0) for r in rows]
    b.barh(y, d, 0.7, color=["tab:green" if v >= 0 else "tab:red" for v in d])
    b.axvline(0, c="k", lw=0.8)
    b.set_xlabel("output tok/s/GPU vs its base (%): the plan, or sync + ...: the sync row")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def markdown(baseline: whatif.Row, rows: list[whatif.Row], sync: whatif.Row) -> str:
    """One row per setting: the simulated metrics, the change against its own base (the plan, or the
    plan with synchronous scheduling for a knob applied on top of it), and the decode step's split."""
    out = ["| change | TPOT p90 ms | out tok/s/GPU | change vs its base | GPU ms | exposed host ms | "
           "API wait ms | host work ms | API server ms |", "|" + "---|" * 9]
    for r in [baseline] + rows:
        m = r.metrics
        ref = _base_of(r, baseline, sync)
        d = whatif.deltas(m, ref.metrics).get("output_tps_per_gpu", 0.0) if r is not baseline else 0.0
        out.append(f"| {r.label or 'baseline (the plan)'} | {m['tpot_p90_s'] * 1e3:.1f} "
                   f"| {m['output_tps_per_gpu']:.0f} "
                   f"| {d:+.1%} | {m['gpu_ms']:.2f} | {m['host_exposed_ms']:.2f} | {m['api_wait_ms']:.2f} "
                   f"| {m['host_work_ms']:.2f} | {m['api_server_ms']:.2f} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default="v41-flash-gb300-nvl72")
    ap.add_argument("--decode-batch", type=int, default=None, help="default: the plan's cap per rank")
    ap.add_argument("--out", default="runs/host_whatif")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    plan = load_plan(args.plan)
    base = baseline_specs(SimpleNamespace(workload=None, rate=None, profile=None, profile_any_hardware=False), plan)
    print(f"{plan.name}: decode {plan.decode[0].tag}, profile {base.profile.name}\n")
    exposure(base, plan)
    rows, baseline = [], None
    studies = [[k] for k in KNOBS] + [[SYNC, k] for k in KNOBS if k is not SYNC]
    for sets in studies:
        baseline, part = study(plan, base, sets, workers=args.workers, batch=args.decode_batch)
        rows += part
    sync = next(r for r in rows if r.combo == (("host.async_scheduling", False),))
    print()
    print(table(baseline, rows))
    print()
    print(markdown(baseline, rows, sync))
    write_outputs(args.out, baseline, rows)
    chart(Path(args.out) / "host_whatif.png", baseline, rows, sync)
    print(f"\nwrote {args.out}/whatif.csv, whatif.png, whatif_step.png, host_whatif.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
