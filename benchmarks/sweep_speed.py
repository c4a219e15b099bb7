"""Wall time of a 1,000-cell `rackplan sweep` (simulations of the tiny CPU plan, 20 requests each) on a
local Ray instance of 1, 2 and 4 workers and on the local process pool, each a `rackplan` subprocess
from start to table (Ray's start-up included); checks every run wrote the same table. Prints a
markdown block for benchmarks/RESULTS.md. The machine's core count bounds what more workers buy.

    python benchmarks/sweep_speed.py [--workers 1 2 4] [--no-pool]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from search_speed import timed

# 10 rates x 10 host scales x 10 NVLink speeds = 1,000 cells
GRID = """kind: simulate
plans: [tiny-cpu]
rates: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
requests: 20
whatif:
  cpu.overhead_scale: [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 8.0]
  hardware.nvlink_gbps: [50, 100, 200, 300, 400, 600, 900, 1200, 1800, 3600]
"""


def run(folder: Path, name: str, extra: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the command and its children, the table's text)."""
    cmd = [sys.executable, "-m", "rackplan.cli", "sweep", str(folder / "grid.yaml"), "--out", str(folder / name),
           "--quiet"] + extra
    wall, cpu, proc = timed(cmd)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return wall, cpu, (folder / name / "sweep.csv").read_text()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--no-pool", action="store_true", help="skip the process-pool runs")
    args = ap.parse_args()
    lines = [f"1,000-cell sweep on {os.cpu_count()} cores (`rackplan sweep grid.yaml --out DIR --workers K`):", "",
             "| backend | workers | wall s | CPU s (with children) | same table |", "|---|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        (folder / "grid.yaml").write_text(GRID)
        first = None
        runs = [] if args.no_pool else [("process pool", k, []) for k in args.workers]
        if importlib.util.find_spec("ray"):
            runs += [("Ray (local instance)", k, ["--ray", "auto"]) for k in args.workers]
        else:
            lines.append("Ray: not installed (pip install 'rackplan[ray]'); process pool only")
        for backend, k, extra in runs:
            wall, cpu, table = run(folder, f"{backend.split()[0].lower()}{k}", ["--workers", str(k)] + extra)
            first = first or table
            lines.append(f"| {backend} | {k} | {wall:.1f} | {cpu:.1f} | {'yes' if table == first else 'NO'} |")
            print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
