"""Does a busy second core slow the CPU-speed probe? (issue 34, session 20)

executor/probe.py's probe, pinned to core 0 (the median of 15 probes), with core 1 idle, running a pure-Python
loop, or running a one-thread torch matmul loop, in rounds. Serving keeps the prefill and decode ranks busy on both
cores; if a busy neighbour slowed a core, a sweep that times one rank at a time would price steps faster than they
serve. Run: python benchmarks/investigations/probe_other_core.py [--rounds N] (2 cores, Linux).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from rackplan.executor.probe import cpu_probe

BUSY = {  # what core 1 runs
    "py": "import os\nos.sched_setaffinity(0, {1})\nx = 0\nwhile True:\n    x += 1",
    "torch": "import os, torch\nos.sched_setaffinity(0, {1})\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\n"
             "while True:\n    a @ a",
}


def probe_median(n: int = 15) -> float:
    """The median of n probes (seconds), 50 ms apart."""
    out = []
    for _ in range(n):
        out.append(cpu_probe()[0])
        time.sleep(0.05)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    got: dict[str, list[float]] = {"idle": [], **{k: [] for k in BUSY}}
    for _ in range(args.rounds):
        got["idle"].append(probe_median())
        for kind, code in BUSY.items():
            proc = subprocess.Popen([sys.executable, "-c", code])
            try:
                time.sleep(1.0)
                got[kind].append(probe_median())
            finally:
                proc.kill()
                proc.wait()
            time.sleep(0.5)
    for kind, vals in got.items():
        print(f"core 1 {kind:5s}: probe median ms per round {' '.join(f'{v * 1e3:.1f}' for v in vals)}; "
              f"mean {statistics.mean(vals) * 1e3:.2f}")


if __name__ == "__main__":
    main()
