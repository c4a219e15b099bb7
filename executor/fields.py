"""What the executor does with a plan's fields it cannot run: refused before any rank starts, each
with one line naming the field (docs/plan_fields.md lists every field and what runs it), and the
record of a run saying what ran (`plan_record`).
"""
from __future__ import annotations

from rackplan.specs import Plan, SpecError


def layouts(plan: Plan):
    """(field prefix, layout) of every pool entry: 'prefill[0]', 'decode[1]', 'aggregated[0]'."""
    for pool in ("prefill", "decode", "aggregated"):
        for i, lay in enumerate(getattr(plan, pool)):
            yield f"{pool}[{i}]", lay


def check_plan_fields(plan: Plan, device: str, serving: bool, where: str) -> None:
    """Refuse (SpecError naming the field) what the executor would not run as planned: pipeline
    stages, weight offload, a fixed MoE imbalance (the simulator's knob: the executor's router makes
    its own), vLLM's all-gather / reduce-scatter EP exchange, another engine or MoE backend; in
    serving mode an API-server count or a stream interval (the executor has no API server: its tokens
    are not streamed); a prefill pool on other hardware (one device kind runs every rank)."""
    if plan.prefill_hardware:
        raise SpecError(where, "prefill_hardware", "unset (the executor runs every rank on one device kind; a "
                        "mixed-hardware plan is simulated: sim/mixed.py)", plan.prefill_hardware)
    if plan.kv_link_bw is not None:
        raise SpecError(where, "kv_link_bw", "unset (the executor's KV cache crosses the machine's own link; the "
                        "declared link prices it in the simulator)", plan.kv_link_bw)
    for name, lay in layouts(plan):
        if lay.pp != 1:
            raise SpecError(where, f"{name}.pp", "1 (the executor runs one pipeline stage)", lay.pp)
        if lay.offload_gb:
            raise SpecError(where, f"{name}.offload_gb", "0 (the executor keeps every weight on its device)",
                            lay.offload_gb)
        if lay.moe_imbalance is not None:
            raise SpecError(where, f"{name}.moe_imbalance", "unset (the executor's router gives its own expert "
                            "load; a fixed factor is the simulator's)", lay.moe_imbalance)
        if lay.all2all == "allgather_reducescatter":
            raise SpecError(where, f"{name}.all2all", "deepep or unset (the executor exchanges tokens with its own "
                            "all-to-all; vLLM's all-gather / reduce-scatter backend is priced, not run)", lay.all2all)
        if lay.engine not in (None, "vllm"):
            raise SpecError(where, f"{name}.engine", "vllm or unset (the executor runs its own kernels; another "
                            "engine's expert kernels are priced, not run)", lay.engine)
        if lay.moe_backend is not None:
            raise SpecError(where, f"{name}.moe_backend", "unset (the executor runs its own grouped GEMM; a MoE "
                            "backend's kernel is priced, not run)", lay.moe_backend)
        if serving and lay.api_servers is not None:
            raise SpecError(where, f"{name}.api_servers", "unset in serving mode (the executor runs no API "
                            "server: its requests come from the workload in process)", lay.api_servers)
        if serving and lay.stream_interval != 1:
            raise SpecError(where, f"{name}.stream_interval", "1 in serving mode (the executor streams no "
                            "tokens: each step's tokens exist when the step ends)", lay.stream_interval)


def check_replicas(plan: Plan, where: str, max_ranks: int) -> None:
    """Every replica of a serving plan runs on its own ranks: one that does not fit in `max_ranks`
    is refused (SpecError naming the largest pool entry's replicas), never dropped."""
    need = max(sum(lay.total_gpus for lay in pool) for pool in (plan.prefill, plan.decode)) if plan.colocated \
        else sum(lay.total_gpus for _, lay in layouts(plan))
    if need > max_ranks:
        name, lay = max(layouts(plan), key=lambda x: x[1].total_gpus)
        raise SpecError(where, f"{name}.replicas", f"replicas whose ranks fit the {max_ranks} this machine runs "
                        f"(the plan's instances need {need})", lay.replicas)


def plan_record(plan: Plan, device: str, serving: bool) -> dict:
    """What ran of the plan (written beside the measurements as ran.json): the serving mode, the
    router and KV sizing the serving policy used, and per layout the features run as planned on
    this device (what is not run is refused up front by check_plan_fields, or listed here false)."""
    ran: dict = {"plan": plan.name, "device": device,
                 "mode": ("aggregated" if not plan.disaggregated else "colocated" if plan.colocated
                          else "disaggregated") if serving else "benchmark"}
    if serving:
        ran.update(router=plan.router, kv="paged blocks per rank, capacity from the memory model "
                   "(gpu_memory_utilization)", replicas={name: lay.replicas for name, lay in layouts(plan)})
    for name, lay in layouts(plan):
        ran[name] = {"cuda_graphs": lay.cuda_graphs and device == "cuda", "dbo": lay.dbo,
                     "dbo_token_thresholds": lay.dbo,  # executor/dbo.py: vLLM's rule, per step
                     "speculation": lay.speculation is not None, "async_scheduling": lay.async_scheduling and
                     serving and plan.disaggregated and not plan.colocated}
    return ran
