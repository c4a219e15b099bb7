"""A fixed CPU-speed probe: how fast this process's CPU runs host code at the start and the end of a
serving run's timed window (calibration/host_fit.py normalises the host parts by it), and in place while a
rank runs (`InPlace`: every PROBE_EVERY_STEPS benchmark steps, every PROBE_EVERY_S of a serving leader's
clock), the rig's speed state as it was when the steps around it ran (calibration/speed.py puts a run's
measured seconds at one reference speed; HardwareSpec.cpu_speed prices a run at its own).

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
IN_PLACE_REPS = 3  # an in-place probe's repetitions (median): ~17 ms of CPU on the dev VM (3 x 5.5 ms, measured)
PROBE_EVERY_STEPS = 5  # benchmark mode: before timed steps 0, 5, 10, ... and after the last one
PROBE_EVERY_S = 2.0  # serving: a leader's first step, then its first step 2 s or more after the last probe
# (~0.9% of a rank's time; a 8 s serving segment of the dev machine gets ~5 per rank)


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


def cpu_probe(reps: int = PROBE_REPS, warm: bool = True) -> tuple[float, float]:
    """(thread CPU seconds, wall seconds) of one repetition of probe_work: medians over `reps` repetitions
    (`warm`: after an untimed first call that brings the code in)."""
    if warm:
        probe_work()
    cpu, wall = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.thread_time()
        probe_work()
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
    return float(np.median(cpu)), float(np.median(wall))


def probe_record(base: dict, dtype: str, phase: int, reps: int = PROBE_REPS, at: dict | None = None) -> dict:
    """The probe as a record of this rank (op host.probe, role serve; step 0 at the start of the timed window,
    1 at its end, 2, 3, ... in place, `at` saying where: InPlace): seconds = wall, cpu_s = thread CPU seconds
    of one repetition."""
    cpu, wall = cpu_probe(reps, warm=at is None)
    return dict(base, role="serve", instance_dp=1, ep=1, step=phase, op="host.probe", layers=1,
                shape={"probe_reps": reps, "probe_seqs": PROBE_SEQS, "probe_steps": PROBE_STEPS, **(at or {})},
                dtype=dtype, seconds=wall, cpu_s=cpu, source="measured", cuda_graphs=False)


class InPlace:
    """A rank's in-place probes: `due` says when one is due (benchmark: every PROBE_EVERY_STEPS timed steps;
    serving: PROBE_EVERY_S after the last), `probe` runs one between two steps and returns its record
    (shape: in_place, the step it precedes, the rank's clock in s; steps 2, 3, ...: 0 and 1 are a serving
    run's start and end probes) and its wall seconds, which the caller keeps out of every step's time."""

    def __init__(self, base: dict, dtype: str):
        self.base, self.dtype = base, dtype
        self.count = 0
        self.last_s = -float("inf")

    def due(self, step: int | None = None, now_s: float | None = None) -> bool:
        """Benchmark mode: before timed step `step` (0, 5, 10, ...); serving: at the clock `now_s`."""
        if step is not None:
            return step % PROBE_EVERY_STEPS == 0
        return now_s is not None and now_s - self.last_s >= PROBE_EVERY_S

    def probe(self, before_step: int, now_s: float) -> tuple[dict, float]:
        """One probe (IN_PLACE_REPS repetitions, no warm-up call: the rank's code runs between steps as it is):
        (its record, the wall seconds it took)."""
        t0 = time.perf_counter()
        rec = probe_record(self.base, self.dtype, 2 + self.count, IN_PLACE_REPS,
                           {"in_place": True, "before_step": before_step, "t_s": round(now_s, 6)})
        self.count += 1
        self.last_s = now_s
        return rec, time.perf_counter() - t0
