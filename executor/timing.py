"""Per-op timing of one step on one rank: CUDA events on GPU, perf_counter on CPU.

A step's sections accumulate per op (seconds summed over the layers that ran the op) and count
how many layers ran it. On CPU the ranks meet at a barrier before each communication section, so
dispatch/combine time is the exchange itself, not the wait for a slower rank's attention; on
GPU events on the current stream time the device work (launch overhead included when a section
is host-bound). Host sections (batch preparation, metadata, sampling) use perf_counter always.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch
import torch.distributed as dist


class NullTimer:
    """Times nothing (reference runs, warm-up)."""

    @contextmanager
    def section(self, op: str, comm: bool = False, host: bool = False, group=None):
        yield


class StepTimer:
    def __init__(self, device: str, group=None):
        self.cuda = device == "cuda"
        self.group = group
        self.reset()

    def reset(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self._events: list[tuple[str, object, object]] = []

    @contextmanager
    def section(self, op: str, comm: bool = False, host: bool = False, group=None):
        """Time the body as `op`; `comm`: meet the group (`group`, else the timer's) first on CPU;
        `host`: wall time."""
        group = group if group is not None else self.group
        if comm and not self.cuda and group is not None:
            dist.barrier(group=group)
        if self.cuda and not host:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end.record()
                self._events.append((op, start, end))
            return
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[op] += time.perf_counter() - t0

    def collect(self) -> dict[str, float]:
        """Seconds per op of the step that just ran (synchronises the device)."""
        if self.cuda:
            torch.cuda.synchronize()
            for op, start, end in self._events:
                self.seconds[op] += start.elapsed_time(end) / 1e3
        out = dict(self.seconds)
        return out


@contextmanager
def wall(device: str):
    """Wall time of a block, device work included; yields a dict that gets 'seconds'."""
    res = {}
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    try:
        yield res
    finally:
        if device == "cuda":
            torch.cuda.synchronize()
        res["seconds"] = time.perf_counter() - t0


class HostClock:
    """Wall and thread CPU seconds of a step's host parts (host.* ops of rackplan/specs/ops.py).
    Wall time is what the step waits; CPU time is the part's own work, which a neighbour's load on
    a shared machine does not stretch (store round trips and barrier waits are wall time only)."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def add(self, name: str, wall_s: float, cpu_s: float) -> None:
        self.wall[name] = self.wall.get(name, 0.0) + wall_s
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu_s

    @contextmanager
    def part(self, name: str):
        """Time the body as host part `name` (wall and this thread's CPU time)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0, time.thread_time() - c0)
