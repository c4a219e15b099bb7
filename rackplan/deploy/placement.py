"""Where each planned instance runs: hosts, GPU indices, DP ranks per host, and its ports.

Instances are placed in plan order (prefill, decode, aggregated pools; replicas in turn). One that
needs at least a host takes whole hosts (its DP ranks split evenly, `--data-parallel-size-local`
per host, `--data-parallel-start-rank` counting on), inside one NVLink domain when it fits one (the
plan priced its all-to-all over NVLink: an NVL72 instance never straddles two racks); smaller ones
share a host, packed first-fit on contiguous GPU indices (CUDA_VISIBLE_DEVICES). Every instance gets
its own HTTP port, DP RPC port and NIXL side-channel port range (vLLM adds the DP rank to
VLLM_NIXL_SIDE_CHANNEL_PORT), so instances sharing a host never collide.
"""
from __future__ import annotations

from dataclasses import dataclass

from rackplan.specs import HardwareSpec, Layout, Plan, SpecError

HTTP_PORT = 8100  # first instance API port (the router listens on ROUTER_PORT, 8000)
RPC_PORT = 13345  # first --data-parallel-rpc-port (vLLM docs' example value)
NIXL_PORT = 5600  # vLLM's default VLLM_NIXL_SIDE_CHANNEL_PORT


@dataclass(frozen=True)
class Slice:
    """The part of one instance on one host."""

    host: int
    gpus: tuple[int, ...]  # GPU indices on that host
    start_rank: int  # first DP rank on this host
    ranks: int  # DP ranks on this host

    @property
    def devices(self) -> str:
        return ",".join(map(str, self.gpus))


@dataclass(frozen=True)
class Instance:
    """One running vLLM instance of a planned layout."""

    name: str  # e.g. "prefill0-2": pool, layout index, replica
    pool: str  # prefill | decode | aggregated
    layout: Layout
    port: int
    rpc_port: int
    nixl_port: int  # side-channel base port; rank r listens on nixl_port + r
    slices: tuple[Slice, ...]

    @property
    def head(self) -> int:
        return self.slices[0].host

    @property
    def multi_host(self) -> bool:
        return len(self.slices) > 1


@dataclass(frozen=True)
class Placement:
    instances: tuple[Instance, ...]
    num_hosts: int
    gpus_per_host: int

    def on_host(self, host: int) -> list[tuple[Instance, Slice]]:
        return [(inst, s) for inst in self.instances for s in inst.slices if s.host == host]

    def pool(self, name: str) -> list[Instance]:
        return [inst for inst in self.instances if inst.pool == name]


def _whole_hosts(lay: Layout, used: list[int], hw: HardwareSpec, field: str) -> tuple[Slice, ...]:
    """Whole hosts for `lay`, inside one NVLink domain when it fits one (an NVL72 instance that crossed
    racks would run its all-to-all over the scale-out network the plan did not price): the hosts up to
    the next domain are left empty for smaller instances (first-fit reuses them)."""
    g = hw.gpus_per_node
    if lay.gpus % g or g % lay.tp:
        raise SpecError("", field, f"a layout that fills whole hosts of {g} GPUs ({lay.tag} has {lay.gpus} "
                        f"GPUs, TP {lay.tp})")
    n, per = lay.gpus // g, hw.nodes_per_domain
    first = len(used)
    if 1 < n <= per and first // per != (first + n - 1) // per:
        used += [0] * (per - first % per)
        first = len(used)
    used += [g] * n
    local = g // lay.tp
    return tuple(Slice(first + k, tuple(range(g)), k * local, local) for k in range(n))


def _shared_host(lay: Layout, used: list[int], g: int) -> Slice:
    for h, n in enumerate(used):
        if g - n >= lay.gpus:
            used[h] += lay.gpus
            return Slice(h, tuple(range(n, n + lay.gpus)), 0, lay.dp)
    used.append(lay.gpus)
    return Slice(len(used) - 1, tuple(range(lay.gpus)), 0, lay.dp)


def place(plan: Plan, hw: HardwareSpec) -> Placement:
    """Hosts, GPUs, DP ranks and ports of every instance of `plan`."""
    if plan.colocated:
        raise SpecError("", "colocated", "false for a vLLM deployment (time-shared prefill/decode GPUs are "
                        "the CPU executor's mode; vLLM runs each instance on its own GPUs)")
    if plan.prefill_hardware:
        raise SpecError("", "prefill_hardware", "unset for `deploy` (its launch files place every instance on one "
                        "hardware kind's nodes; a mixed plan is simulated, not yet deployed)", plan.prefill_hardware)
    g, used, out, nixl = hw.gpus_per_node, [], [], NIXL_PORT
    for inst in plan.instances():
        lay = inst.layout
        slices = _whole_hosts(lay, used, hw, inst.entry) if lay.gpus >= g else (_shared_host(lay, used, g),)
        n = len(out)
        out.append(Instance(inst.slug, inst.pool, lay, HTTP_PORT + n, RPC_PORT + n, nixl, slices))
        nixl += lay.dp
    while used and not used[-1]:
        used.pop()
    hosts = len(used)
    budget = -(-plan.num_gpus // g)
    if hosts > budget:
        raise SpecError("", "num_gpus", f"enough hosts: the instances need {hosts} hosts of {g} GPUs, the plan "
                        f"has {plan.num_gpus} GPUs ({budget} hosts)")
    return Placement(tuple(out), hosts, g)
