"""Does the planner's headline hold? Plan a case, then re-simulate the plan.yaml it wrote.

For each case: `rackplan plan ... --workers 1` (CPU time and peak RSS of the child from os.wait4),
then `rackplan simulate --plan plan.yaml` (the planner's own run, which must reproduce the
headline exactly) and `rackplan simulate --plan plan.yaml --requests 4N` (N the requests the
planner's verification used): its output tokens/s/GPU within 5% of the headline, stable, and
TTFT/TPOT p90 within the SLOs (issue 12). Cases: the seed scenario (`rackplan plan`, no
arguments) and the H200 32-GPU case of docs/plan.md; --big adds GB300 NVL72 at 144 and 576 GPUs
(does it finish with a plan; CPU and RSS against issue 11's 60 CPU-s / 300 MB at 576).

    python benchmarks/plan_check.py [--big] [--case seed|h200|gb300-144|gb300-576 ...]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml
from search_speed import timed

H200 = ["--model", "deepseek-v3", "--hardware", "h200-sxm", "--gpus", "32", "--workload", "isl4k-osl1k",
        "--ttft-p90", "2s", "--tpot-p90", "50ms"]
CASES = {"seed": [], "h200": H200, "gb300-144": ["--gpus", "144"], "gb300-576": ["--gpus", "576"]}
RESIMULATE = ("seed", "h200")  # the must-show cases; the big ones only have to finish with a plan
TOLERANCE = 0.05  # 4x re-simulation within 5% of the headline tokens/s/GPU


def rackplan(args: list[str]) -> tuple[float, float, str]:
    """(CPU s, peak RSS MB, stdout) of one `rackplan` subprocess; exits on failure."""
    _, cpu, proc = timed([sys.executable, "-m", "rackplan.cli"] + args)
    if proc.returncode != 0:
        raise SystemExit(f"rackplan {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return cpu, proc.max_rss_mb, proc.stdout


def simulate(plan_path: Path, requests: int | None = None) -> tuple[float, dict]:
    args = ["simulate", "--plan", str(plan_path), "--json"] + (["--requests", str(requests)] if requests else [])
    cpu, _, out = rackplan(args)
    return cpu, json.loads(out)


def check(name: str, folder: Path) -> dict:
    path = folder / f"{name}.yaml"
    cpu, rss, _ = rackplan(["plan"] + CASES[name] + ["--out", str(path), "--workers", "1", "--quiet"])
    plan = yaml.safe_load(path.read_text())
    pred, slo = plan["predicted"], plan["slo"]
    row = {"case": name, "layout": plan["description"].split(": ", 1)[-1], "plan_cpu_s": cpu, "plan_rss_mb": rss,
           "headline": pred["output_tps_per_gpu"], "estimate": pred["est_output_tps_per_gpu"],
           "rate": pred["request_rate"], "requests": int(pred.get("sim_requests", 0))}
    if name not in RESIMULATE or not row["requests"]:
        return row
    _, same = simulate(path)
    row["reproduced"] = same["metrics"]["output_tps_per_gpu"] == pred["output_tps_per_gpu"]
    sim_cpu, long = simulate(path, 4 * row["requests"])
    m = long["metrics"]
    row.update(long_cpu_s=sim_cpu, long_tps=m["output_tps_per_gpu"], ratio=m["output_tps_per_gpu"] / row["headline"],
               long_stable=long["stable"], ttft=m["ttft_p90_s"], tpot=m["tpot_p90_s"],
               meets=bool(long["stable"] and m["ttft_p90_s"] <= slo["ttft_p90_s"]
                          and m["tpot_p90_s"] <= slo["tpot_p90_s"]),
               slo=(slo["ttft_p90_s"], slo["tpot_p90_s"]), headline_ttft=pred["sim_ttft_p90_s"])
    row["ok"] = row["reproduced"] and abs(row["ratio"] - 1) <= TOLERANCE and row["meets"]
    return row


def table(rows: list[dict]) -> str:
    out = ["| case | plan | plan CPU s | peak RSS MB | verified tok/s/GPU (estimate) | req/s | requests N | "
           "`simulate --plan` reproduces | 4N tok/s/GPU (ratio) | 4N TTFT / TPOT p90 (SLO) | holds |",
           "|---|---|---:|---:|---:|---:|---:|---|---:|---|---|"]
    for r in rows:
        layout = r["layout"].replace("|", "&#124;")  # a bare | would split the cell
        base = (f"| {r['case']} | {layout} | {r['plan_cpu_s']:.1f} | {r['plan_rss_mb']:.0f} | "
                f"{r['headline']:,.0f} ({r['estimate']:,.0f}) | {r['rate']:.4g} | {r['requests']:,} | ")
        if "ratio" not in r:
            out.append(base + "- | - | - | finished with a plan |")
            continue
        out.append(base + f"{'yes' if r['reproduced'] else 'NO'} | {r['long_tps']:,.0f} ({r['ratio']:.3f}) | "
                   f"{r['ttft']:.3f} s / {r['tpot'] * 1e3:.1f} ms ({r['slo'][0]:g} s / {r['slo'][1] * 1e3:g} ms)"
                   f"{'' if r['long_stable'] else ', UNSTABLE'} | {'yes' if r['ok'] else 'NO'} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", action="store_true", help="also GB300 NVL72 at 144 and 576 GPUs")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases (repeatable)")
    args = ap.parse_args()
    names = args.case or (list(CASES) if args.big else list(RESIMULATE))
    with tempfile.TemporaryDirectory(prefix="rackplan-plan-check-") as tmp:
        rows = [check(n, Path(tmp)) for n in names]
    print(table(rows))
    bad = [r["case"] for r in rows if r.get("ok") is False]
    if bad:
        raise SystemExit(f"the headline does not hold for: {', '.join(bad)}")


if __name__ == "__main__":
    main()
