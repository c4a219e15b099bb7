"""A fixed CPU-speed probe: how fast this process's CPU runs host code at the start and the end of a
serving run's timed window (calibration/host_fit.py normalises the host parts by it).

Why: the host parts are fitted on thread CPU time, which a neighbour's load does not stretch, yet whole
runs of the same shape run 7-16% faster or slower than one another (benchmarks/RESULTS.md, issue 15: the
VM's speed drifts from run to run and hour to hour; a pure-Python loop's CPU time varies 1.5x), the same
for every part of one run. The probe is a deterministic workload of known size (the kinds of work the host
parts do: Python dict and list bookkeeping, small numpy arrays, small torch tensors built from lists and
indexed), timed in the same process and thread as the loop; its CPU seconds are the run's speed.
"""
from __future__ import annotations

import time

import numpy as np
import torch

PROBE_REPS = 7  # repetitions of the workload per probe; the probe is their median (one preempted rep is no level)
PROBE_SEQS = 128  # sequences of the workload's mock batch (its size is fixed: the same work in every run)
PROBE_STEPS = 40  # mock steps per repetition


def probe_work(seqs: int = PROBE_SEQS) -> int:
    """One repetition of the probe's workload (~2-4 ms on a 2020s x86 core); returns a checksum so that
    nothing is optimised away."""
    seats = {i: {"rid": i, "ctx": 16 + i % 7, "emitted": 0} for i in range(seqs)}
    check = 0
    for step in range(PROBE_STEPS):  # scheduler-like bookkeeping: walk the seats, update, pick
        picked = [s for s in seats.values() if (s["rid"] + step) % 3 != 0]
        for s in picked:
            s["ctx"] += 1
            s["emitted"] += 1
        order = sorted(picked, key=lambda s: (s["ctx"], s["rid"]))
        check += order[0]["rid"] + len(order)
        slots = torch.tensor([s["rid"] for s in order])  # input preparation: tensors from lists, indexing
        last = torch.arange(seqs)[slots]
        ctx = np.array([s["ctx"] for s in order], dtype=np.int64)  # [picked]
        check += int(last[-1]) + int(ctx.sum() % 97) + int(np.argmax(np.cumsum(ctx) > ctx.sum() // 2))
    return check


def cpu_probe(reps: int = PROBE_REPS) -> tuple[float, float]:
    """(thread CPU seconds, wall seconds) of one repetition of probe_work: medians over `reps` repetitions."""
    probe_work()  # untimed: the first call brings the code in
    cpu, wall = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.thread_time()
        probe_work()
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
    return float(np.median(cpu)), float(np.median(wall))


def probe_record(base: dict, dtype: str, phase: int, reps: int = PROBE_REPS) -> dict:
    """The probe as a record of this rank (op host.probe, role serve; step 0 at the start of the timed window,
    1 at its end): seconds = wall, cpu_s = thread CPU seconds of one repetition."""
    cpu, wall = cpu_probe(reps)
    return dict(base, role="serve", instance_dp=1, ep=1, step=phase, op="host.probe", layers=1,
                shape={"probe_reps": reps, "probe_seqs": PROBE_SEQS, "probe_steps": PROBE_STEPS}, dtype=dtype,
                seconds=wall, cpu_s=cpu, source="measured", cuda_graphs=False)
