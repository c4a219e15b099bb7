"""What case (a) executes per request besides pricing, counted (no clock): Python bytecodes by module and
SimPy events, with every step-price cache filled (as benchmarks/pricing_share.py fills them), side by side
with another checkout.

A count does not move with the machine's load, where CPU seconds on a shared machine move by +-20%: the
bytecodes executed per request (sys.settrace with opcode events, in the simulation only) by the module
that runs them, and the SimPy events processed per request. Bytecodes are not instructions (a numpy call or
a frame set-up costs more than one), so the figure to quote for speed stays the CPU or callgrind one
(benchmarks/sim_speed.py); this says where the Python work is and what a change removed.

    python benchmarks/policy_work.py [--requests 20000] [--baseline OTHER/.venv/bin/python]
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

import pricing_share as ps
import simpy

import rackplan
from rackplan.sim import pricer
from rackplan.sim.simulator import simulate
from rackplan.specs import load_plan, load_profile, load_workload


def count(n: int) -> dict:
    """{module: bytecodes, 'events': SimPy events} of case (a)'s filled run of `n` requests."""
    pricer.StepPricer.shared = classmethod(ps._filled)  # type: ignore[method-assign]
    plan = load_plan("v41-flash-gb300-nvl72")
    wl, prof = load_workload(plan.workload), load_profile("gb300-nvl72-vllm")
    ps.run(plan, wl, prof, n, {})  # the cold run: every key it prices
    fill = {k: dict(v._cache) for k, v in ps.SEEN.items()}
    pricer._kept.clear()
    ps.FILL.clear()
    ps.FILL.update(fill)
    ops: collections.Counter = collections.Counter()

    def tracer(frame, event, _arg):
        if event == "call":
            frame.f_trace_opcodes = True
        elif event == "opcode":
            ops[frame.f_code.co_filename] += 1
        return tracer

    step = simpy.Environment.step
    events = [0]

    def counted(env):
        events[0] += 1
        step(env)

    simpy.Environment.step = counted  # type: ignore[method-assign]
    sys.settrace(tracer)
    try:
        simulate(plan, wl, prof, num_requests=n)
    finally:
        sys.settrace(None)
        simpy.Environment.step = step  # type: ignore[method-assign]
    out: collections.Counter = collections.Counter()
    for path, c in ops.items():
        if Path(path).name != Path(__file__).name:  # (not this script's own counter)
            out[_module(path)] += c
    out["events"] = events[0]
    return dict(out)


def _module(path: str) -> str:
    """A short name of the module at `path`: relative to the checkout, simpy as one, else the file's name."""
    if "/simpy/" in path:
        return "simpy"
    root = str(Path(rackplan.__file__).resolve().parent.parent) + "/"
    return path[len(root):] if path.startswith(root) else path.rsplit("/", 1)[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--baseline", help="python of another checkout, counted the same way")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # (one side's counts, for --baseline)
    args = ap.parse_args()
    if args.json:
        print(json.dumps(count(args.requests)))
        return
    ours = count(args.requests)
    base = None
    if args.baseline:
        cmd = [args.baseline, str(Path(__file__).resolve()), "--requests", str(args.requests), "--json"]
        base = json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)
    n = args.requests
    print(f"case (a), {n:,} requests, step-price caches filled: per request")
    head = f"{'module':<34}{'this tree':>11}"
    print(head + (f"{'baseline':>11}{'change':>9}" if base else ""))
    names = sorted(set(ours) | set(base or {}) - {"events"}, key=lambda k: -max(ours.get(k, 0), (base or {}).get(k, 0)))
    rows = [k for k in names if k != "events" and max(ours.get(k, 0), (base or {}).get(k, 0)) >= n] + ["events"]
    total = sum(v for k, v in ours.items() if k != "events")
    base_total = sum(v for k, v in base.items() if k != "events") if base else 0
    table = [(k, ours.get(k, 0), (base or {}).get(k, 0)) for k in rows] + [("bytecodes, all", total, base_total)]
    for name, a, b in table:
        line = f"{name + (' (SimPy)' if name == 'events' else ''):<34}{a / n:>11.1f}"
        if base:
            line += f"{b / n:>11.1f}{(a / b - 1) if b else 0:>+9.1%}"
        print(line)


if __name__ == "__main__":
    main()
