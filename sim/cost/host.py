"""CPU scheduling overhead and kernel launches, and how much of it the GPU step hides.

Host time per step = scheduler fixed cost + per-request cost x batch + launches (one graph replay
with CUDA graphs, else every kernel). Async scheduling prepares step n+1 while the GPU runs step
n, so the step takes max(gpu, host); without it the two add up.
"""
from __future__ import annotations

from rackplan.specs import Layout, Profile


def host_seconds(layout: Layout, prof: Profile, batch: float, num_layers: int, graphs: bool) -> float:
    """Host-side seconds to schedule and launch one step of `batch` requests on one rank."""
    launches = prof.graph_launch_s if graphs else prof.launch_s * prof.kernels_per_layer * num_layers
    return prof.cpu_step_s + prof.cpu_per_request_s * batch + launches


def combine_host(gpu_s: float, host_s: float, async_scheduling: bool) -> float:
    """Step seconds given device and host seconds."""
    return max(gpu_s, host_s) if async_scheduling else gpu_s + host_s
