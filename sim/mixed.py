"""Mixed hardware: a disaggregated plan whose prefill pool runs on another hardware kind than its
decode pool (`Plan.prefill_hardware`; `Plan.hardware` is the decode pool's), as aiconfigurator
plans prefill and decode on different systems.

Each pool is priced on its own hardware and profile (the prefill pool's: `Plan.prefill_profile`,
else that hardware's default profile) and holds KV in its own HBM. The two pools sit in different
NVLink domains, so a sequence's KV cache crosses the scale-out network: at the slower NIC of the
two (the faster one cannot send or take more than the other does), or at `Plan.kv_link_bw` where
the plan declares its link, with the decode profile's handshake and efficiency (vLLM's NIXL
connector: the decode instance reads the prompt's KV from the prefill instance). The transfer
arithmetic is sim/cost/transfer.py's.
"""
from __future__ import annotations

from rackplan.specs import HardwareSpec, ModelSpec, Plan, Profile, load_hardware, pool_hardware, resolve_profile

from .cost.transfer import KVLink, kv_link, kv_link_between


def is_mixed(plan: Plan) -> bool:
    """True where the prefill pool names its own hardware."""
    return plan.prefill_hardware is not None


def prefill_side(plan: Plan, hw: HardwareSpec, prof: Profile,
                 any_hardware: bool = False) -> tuple[HardwareSpec, Profile]:
    """The prefill pool's hardware and profile: the plan's own (`hw`, `prof`), or its prefill_hardware's
    (SpecError where that profile was fitted on other hardware, unless `any_hardware`)."""
    if not is_mixed(plan):
        return hw, prof
    pre = load_hardware(plan.prefill_hardware)
    return pre, resolve_profile(plan.prefill_profile, None, pre, any_hardware)


def plan_kv_link(plan: Plan, model: ModelSpec, hw: HardwareSpec, prof: Profile) -> KVLink:
    """The link a sequence's KV takes from its prefill rank to its decode rank in this plan: NVLink
    when one domain holds the whole plan (single hardware), else the scale-out NIC; between two
    hardware kinds the slower NIC of the two; `Plan.kv_link_bw` where the plan declares one."""
    if is_mixed(plan):
        return kv_link_between(model, pool_hardware(plan, hw, "prefill"), hw, prof, plan.kv_link_bw)
    if plan.kv_link_bw is not None:
        return kv_link_between(model, hw, hw, prof, plan.kv_link_bw)
    return kv_link(model, hw, prof, plan.gpus_used <= hw.domain_size)
