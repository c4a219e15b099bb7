"""Where the CPU goes while a plan is served, by process, at several request rates: does the driver (the
`rackplan execute` parent serving the run's c10d store, not pinned) or an idle leader's polling take CPU
time that a busy rank's core then lacks, and more so at lower load?

For each rate a copy of the plan's workload at that Poisson rate is served by `rackplan execute`; while it
runs, /proc/<pid>/task/*/stat of the driver and every descendant (ranks, the reaper) is read every 50 ms:
each thread's utime + stime (CPU seconds counted by the kernel, not timed) from the first sample in which
every rank is alive to the last, divided by that span's wall seconds (the driver's own start-up, importing
torch, is left out). Rates in the order given.

Usage: python benchmarks/investigations/proc_cpu.py PLAN [--rates 97.8 78.2 48.9] [--seconds 4] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plan_to_hardware import RACKPLAN, workload_at  # noqa: E402

from rackplan.specs import load_plan  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid: int, task: int | None = None) -> tuple[int, str, float] | None:
    """(parent pid, name, CPU seconds) of a live process (or one of its threads), None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    name = raw[raw.index("(") + 1:raw.rindex(")")]
    f = raw[raw.rindex(")") + 2:].split()
    return int(f[1]), name, (int(f[11]) + int(f[12])) / TICK


def label(pid: int, root: int) -> str:
    """driver (the execute parent), reaper, or rank N (the rank's process title, else its pid)."""
    if pid == root:
        return "driver"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return str(pid)
    return "reaper" if "reaper" in cmd else f"rank pid {pid}"


def tree(root: int) -> dict[tuple[str, str], float]:
    """(process label, thread name) -> CPU s, over `root` and its descendants now."""
    procs = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (s := stat(int(d.name))) is not None:
            procs[int(d.name)] = s
    out: dict[tuple[str, str], float] = {}
    todo = [root]
    while todo:
        p = todo.pop()
        if p not in procs:
            continue
        todo += [c for c, s in procs.items() if s[0] == p]
        lab = label(p, root)
        try:
            tasks = [int(t.name) for t in Path(f"/proc/{p}/task").iterdir()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        for t in tasks:
            if (s := stat(p, t)) is not None:
                key = (lab, s[1])
                out[key] = out.get(key, 0.0) + s[2]
    return out


def serve(plan_path: Path, workload: Path, out: Path, ranks: int) -> tuple[dict[tuple[str, str], float], float]:
    """Serve once, sampling the process tree: ((process, thread) -> CPU s while every rank was alive, wall s)."""
    proc = subprocess.Popen(RACKPLAN + ["execute", "--force", "--plan", str(plan_path), "--device", "cpu", "--out",
                                        str(out), "--workload", str(workload)], stdout=subprocess.DEVNULL)
    first, last, t0, t1 = None, {}, 0.0, 0.0
    while proc.poll() is None:
        now = tree(proc.pid)
        alive = len({lab for lab, _ in now if lab.startswith("rank")})
        if alive >= ranks:
            if first is None:
                first, t0 = now, time.perf_counter()
            last, t1 = now, time.perf_counter()
        time.sleep(0.05)
    if first is None:
        return {}, 0.0
    return {k: v - first.get(k, 0.0) for k, v in last.items()}, t1 - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path)
    ap.add_argument("--rates", nargs="+", type=float, required=True, help="request rates, req/s")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds of arrivals per rate")
    ap.add_argument("--out", type=Path, default=Path("runs/proc-cpu"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    plan = load_plan(args.plan)
    print(f"{'rate':>8} {'wall s':>7}  CPU s per wall s by process (kernel's utime + stime)")
    for rate in args.rates:
        wl = workload_at(plan, rate, args.seconds, args.out, least=0)
        cpu, wall = serve(args.plan, wl, args.out / f"serve-{rate:g}", plan.num_gpus)
        by = sorted(((k, v) for k, v in cpu.items() if v > 0), key=lambda kv: -kv[1])
        print(f"{rate:8.1f} {wall:7.1f}  " + ", ".join(f"{p} / {t} {v / wall:.3f}" for (p, t), v in by), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
