"""CPU scheduling overhead and kernel launches, and how much of it the GPU step hides.

Host time per step = scheduler fixed cost + per-request cost x batch + launches (one graph replay
with CUDA graphs, else every kernel). Async scheduling prepares step n+1 while the GPU runs step
n, so the step takes max(gpu, host); without it the two add up, and the engine loop spends
`cpu_iteration_s` between two steps (schedule broadcast, barriers, hand-off bookkeeping). This
is the only place host time is priced: the simulator, the planner's estimate and the calibration
replays take it from the step's StepCost.
"""
from __future__ import annotations

from rackplan.specs import Layout, Profile


def host_seconds(layout: Layout, prof: Profile, batch: float, num_layers: int, graphs: bool) -> float:
    """Host-side seconds to schedule and launch one step of `batch` requests on one rank."""
    launches = prof.graph_launch_s if graphs else prof.launch_s * prof.kernels_per_layer * num_layers
    return prof.cpu_step_s + prof.cpu_per_request_s * batch + launches


def step_seconds(gpu_s: float, host_s: float, layout: Layout) -> float:
    """Step seconds given device and host seconds."""
    return max(gpu_s, host_s) if layout.async_scheduling else gpu_s + host_s


def loop_seconds(layout: Layout, prof: Profile) -> float:
    """Engine-loop seconds between two steps: hidden by async scheduling, else paid every step."""
    return 0.0 if layout.async_scheduling else prof.cpu_iteration_s
