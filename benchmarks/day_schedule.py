"""A plan for a day: instance counts per hour of the shipped diurnal day (tests/data/azure_conv_diurnal_day.csv,
the Azure 2024 conversation trace's shape on 2024-05-14, x2000 its 1/1000 sample: twice the plotted
service's rate), DeepSeek-V3 on H200 shapes (prefill DEP8, decode DEP16 with MTP), SLO TTFT p90 2 s / TPOT
p90 50 ms; then the schedule simulated again interval by interval, and its GPU-hours against the static
plan sized for the peak. Prints both tables and the wall times.

    .venv/bin/python benchmarks/day_schedule.py [--trace-scale K] [--interval 1h] [--interval-requests N]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from rackplan.sim.search import schedule as sch
from rackplan.sim.search.schedule_command import print_schedule
from rackplan.sim.traces import load_trace
from rackplan.specs import load_hardware, load_model, load_plan, load_profile

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(ROOT / "tests" / "data" / "azure_conv_diurnal_day.csv")
BASE = str(ROOT / "tests" / "data" / "h200-dsv3-32gpu.yaml")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-scale", type=float, default=2000.0)
    ap.add_argument("--interval", default="1h")
    ap.add_argument("--interval-requests", type=int, default=2000)
    args = ap.parse_args()
    base = load_plan(BASE)
    specs = (load_model(base.model), load_hardware(base.hardware), load_profile("h200-sxm-vllm"))
    wl = sch.trace_workload(TRACE)
    trace = load_trace(wl)
    t0 = time.perf_counter()
    s = sch.plan_schedule(base, specs + (wl,), trace, TRACE, sch.parse_interval(args.interval), args.trace_scale,
                          sim_requests=args.interval_requests, name="day")
    t1 = time.perf_counter()
    print_schedule(s, list(s.intervals), "sized")
    got = sch.verify(s, specs + (wl,), trace)
    t2 = time.perf_counter()
    print_schedule(s, got, "verified")
    print(f"wall: sizing {t1 - t0:.0f} s, verification {t2 - t1:.0f} s; "
          f"{sum(iv.meets_slo for iv in got)} of {len(got)} intervals meet the SLOs")


if __name__ == "__main__":
    main()
