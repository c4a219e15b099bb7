"""Where a plan's instances sit on the world's ranks, and the process groups each rank talks over.

An instance of layout (dp, tp, ep) holds n = dp * tp contiguous world ranks; local rank
l = d * tp + t is TP rank t of attention replica d. Attention is head-sharded over the tp ranks of
one replica. The routed experts are split over ep ranks by expert and over moe_tp = n / ep ranks
by their intermediate width (expert TP), with moe_tp dividing tp, so TP rank t is
(token slice s = t // moe_tp, expert shard u = t % moe_tp):
  - TP group: the tp ranks of replica d (all-reduce after the output projection and the FFNs),
  - MoE-TP group: the moe_tp ranks of (d, s) (all-reduce of the expert shards' partial sums),
  - EP group: the ep ranks with the same u, EP rank d * (tp / moe_tp) + s (dispatch / combine).
With moe_tp = 1 (ep = dp * tp, the default) each TP rank dispatches its 1/tp slice of the
replica's tokens; with moe_tp = tp (ep = dp) every TP rank dispatches all of them to its shards.

Serving mode places every replica (prefill instances first, then decode, on separate ranks;
colocated plans share ranks between prefill i and decode i); benchmark mode runs one instance of
each pool entry at a time on ranks 0..n-1.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from rackplan.specs import Layout, Plan, SpecError

CPU_MAX_RANKS = 8  # most ranks a CPU run oversubscribes its cores with (TP and serving run real ranks)


@dataclass(frozen=True)
class InstanceSpec:
    """One instance of the plan on world ranks first..first + gpus - 1."""

    name: str  # e.g. "prefill[0].1": pool entry 0, replica 1
    role: str  # prefill | decode | both
    layout: Layout
    first: int

    @property
    def ranks(self) -> range:
        return range(self.first, self.first + self.layout.gpus)

    @property
    def moe_tp(self) -> int:
        return self.layout.moe_tp

    @property
    def slices(self) -> int:
        return self.layout.tp // self.moe_tp


def check_layout(plan_name: str, field: str, lay: Layout) -> None:
    """The MoE split the executor runs: expert-TP shards inside one attention TP group."""
    moe_tp = lay.moe_tp
    if lay.tp % moe_tp:
        raise SpecError(plan_name, f"{field}.ep", f"a multiple of dp ({lay.dp}) whose expert-TP share "
                        f"(dp*tp/ep = {moe_tp}) divides tp ({lay.tp})", lay.ep_size)


def pools(plan: Plan) -> list[tuple[str, tuple[Layout, ...]]]:
    if plan.aggregated:
        return [("aggregated", plan.aggregated)]
    return [("prefill", plan.prefill), ("decode", plan.decode)]


def skipped(inst: InstanceSpec, skip_prefill: bool, skip_decode: bool) -> bool:
    """Whether benchmark mode's --skip-prefill / --skip-decode leave `inst` out of the run."""
    return skip_prefill and inst.role == "prefill" or skip_decode and inst.role == "decode"


def benchmark_instances(plan: Plan) -> list[InstanceSpec]:
    """One instance per pool entry (an aggregated one as a prefill and a decode instance), each
    on ranks 0..n-1, measured one after the other."""
    out = []
    for pool, lays in pools(plan):
        for i, lay in enumerate(lays):
            check_layout(plan.name, f"{pool}[{i}]", lay)
            roles = ("prefill", "decode") if pool == "aggregated" else (pool,)
            out += [InstanceSpec(f"{pool}[{i}]", role, lay, 0) for role in roles]
    return out


def serving_instances(plan: Plan, max_ranks: int) -> list[InstanceSpec]:
    """Every replica of every pool entry on its own ranks (colocated: prefill k and decode k on the
    same ranks). Replicas that do not fit in `max_ranks` are dropped, the largest pool first."""
    reps = {(pool, i): lay.replicas for pool, lays in pools(plan) for i, lay in enumerate(lays)}
    lay_of = {(pool, i): lay for pool, lays in pools(plan) for i, lay in enumerate(lays)}
    for key, lay in lay_of.items():
        check_layout(plan.name, f"{key[0]}[{key[1]}]", lay)
    while _ranks_needed(plan, reps, lay_of) > max_ranks:
        cand = [k for k in reps if reps[k] > 1]
        if not cand:
            raise SpecError(plan.name, "num_gpus", f"at most {max_ranks} ranks on this machine for serving mode "
                            "(one replica of every instance)", _ranks_needed(plan, reps, lay_of))
        reps[max(cand, key=lambda k: (reps[k] * lay_of[k].gpus, k))] -= 1
    out, first, pool = [], 0, None
    for inst in plan.instances():
        if inst.pool != pool:
            pool, first = inst.pool, 0 if plan.colocated else first
        if inst.replica < reps[(inst.pool, inst.index)]:
            out.append(InstanceSpec(inst.name, "both" if inst.pool == "aggregated" else inst.pool, inst.layout, first))
            first += inst.layout.gpus
    return out


def _ranks_needed(plan: Plan, reps: dict, lay_of: dict) -> int:
    per_pool: dict[str, int] = {}
    for (pool, i), n in reps.items():
        per_pool[pool] = per_pool.get(pool, 0) + n * lay_of[(pool, i)].gpus
    return max(per_pool.values()) if plan.colocated else sum(per_pool.values())


def world_size(instances: list[InstanceSpec]) -> int:
    return max(inst.first + inst.layout.gpus for inst in instances)


def torchrun_world() -> int | None:
    """The job's world size under torchrun (RANK and WORLD_SIZE set: one or several hosts), else None."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    return None


def max_ranks(device: str) -> int:
    """Ranks the run has at once: under torchrun the job's world (every host's ranks), else one per
    local GPU, or CPU_MAX_RANKS oversubscribed CPU ranks."""
    world = torchrun_world()
    if world is not None:
        return world
    if device == "cuda":
        import torch
        return torch.cuda.device_count()
    return CPU_MAX_RANKS


def cpu_cores(instances: list[InstanceSpec], world: int) -> list[int]:
    """Core of each CPU rank (serving mode): one each while they last; beyond that, decode ranks
    (busy every step while requests run) keep cores of their own, leaving at least one core that
    the prefill ranks share."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if world <= len(cores):
        return cores[:world]
    decode = [r for inst in instances if inst.role == "decode" for r in inst.ranks]
    core = {r: cores[i] for i, r in enumerate(decode[:len(cores) - 1])}
    rest = cores[len(core):]
    for i, r in enumerate(r for r in range(world) if r not in core):
        core[r] = rest[i % len(rest)]
    return [core[r] for r in range(world)]


@dataclass
class RankGroups:
    """The process groups one rank uses inside its instance (None: a group of one)."""

    inst: InstanceSpec
    local: int  # local rank l = d * tp + t
    instance: object = None
    tp: object = None
    moe_tp: object = None
    ep: object = None

    @property
    def dp_rank(self) -> int:
        return self.local // self.inst.layout.tp

    @property
    def tp_rank(self) -> int:
        return self.local % self.inst.layout.tp

    @property
    def ep_rank(self) -> int:
        return self.dp_rank * self.inst.slices + self.tp_rank // self.inst.moe_tp


def instance_groups(inst: InstanceSpec) -> dict[str, list[list[int]]]:
    """World ranks of every group of an instance, by kind."""
    lay, f = inst.layout, inst.first
    tp, m, s = lay.tp, inst.moe_tp, inst.slices
    out = {"instance": [list(inst.ranks)],
           "tp": [[f + d * tp + t for t in range(tp)] for d in range(lay.dp)],
           "moe_tp": [[f + d * tp + si * m + u for u in range(m)] for d in range(lay.dp) for si in range(s)],
           "ep": [[f + d * tp + si * m + u for d in range(lay.dp) for si in range(s)] for u in range(m)]}
    return out


def make_groups(instances: list[InstanceSpec], rank: int) -> dict[str, RankGroups]:
    """Create every instance's groups (all ranks must call this, in the same order) and return
    this rank's, by instance name."""
    import torch.distributed as dist
    mine: dict[str, RankGroups] = {}
    for inst in instances:
        rg = RankGroups(inst, rank - inst.first) if rank in inst.ranks else None
        for kind, lists in instance_groups(inst).items():
            for ranks in lists:
                if len(ranks) == 1:
                    continue
                g = dist.new_group(ranks)
                if rg is not None and rank in ranks:
                    setattr(rg, kind, g)
        if rg is not None:
            mine[inst.name] = rg
    return mine
