"""One router vocabulary: each `router:` value the simulator accepts, as vllm-router runs it and as the
llm-d inference scheduler (EPP) runs it. The table is the only place a deployment names a policy.

Simulator (sim/simulator.py `_pick`; Plan.router):
- least_loaded: the instance with the fewest queued prompt tokens (prefill) or running + waiting
  requests (decode, aggregated); ties rotate.
- round_robin: instances in turn, per pool.
- prefix_aware: least queued prompt work after subtracting the tokens the instance's prefix cache holds.
- session_affine: a session's later turns stick to the instance its previous turn ran on; first turns
  least_loaded.

vllm-router 0.1.17 (router_args.py choices; README "Load Balancing Policies"; src/policies/):
`power_of_two` picks the less loaded of two random workers, `round_robin` rotates, `cache_aware` routes
by the longest cached prefix and falls back to the shortest queue when loads diverge.
llm-d inference scheduler (plugin types of llm-d-inference-scheduler): `active-request-scorer` (fewer
in-flight requests), `queue-scorer` (fewer waiting requests), `prefix-cache-scorer` (longer prefix
held), `max-score-picker`, `random-picker`; llm-d's prefix-aware example weighs prefix 2 : load 1.
Dynamo 1.6.1 frontend `--router-mode`: round-robin, random, kv (KV-overlap and load), least-loaded.

`exact` says where the deployment does what the simulator priced; each `note` says the difference
where it does not (the simulator's policies are owned by sim/; these are reported, not hidden).
"""
from __future__ import annotations

from dataclasses import dataclass

from rackplan.specs import SpecError


@dataclass(frozen=True)
class Policy:
    """How one simulated routing policy runs in each deployment target."""

    vllm_router: str  # --policy of vllm-router
    dynamo: str  # --router-mode of Dynamo's frontend (dynamo/common/configuration/groups/router_args.py)
    scorers: tuple[tuple[str, float], ...]  # llm-d EPP scorer plugin types and weights
    picker: str  # llm-d EPP picker plugin type
    per_rank: bool  # route to DP ranks (vllm-router --intra-node-data-parallel-size): the policy keeps
    # per-rank state (a prefix cache is per DP rank); otherwise each endpoint's API server spreads its
    # requests over its local ranks by least load (vLLM v1/engine/core_client.py: waiting + running)
    exact: bool
    note: str


POLICIES = {
    "least_loaded": Policy(
        "power_of_two", "least-loaded", (("active-request-scorer", 1.0),), "max-score-picker", False, False,
        "vllm-router has no full least-load scan: power_of_two compares two random endpoints (the same "
        "choice as the simulator with 2 endpoints per pool); llm-d's active-request-scorer + max-score "
        "picker and Dynamo's least-loaded scan all (in-flight requests: the simulator's decode load, not its "
        "prefill token count)"),
    "round_robin": Policy(
        "round_robin", "round-robin", (), "random-picker", False, False,
        "vllm-router and Dynamo rotate as the simulator does; llm-d has no round-robin picker, random-picker gives "
        "each endpoint the same share in expectation, not in order"),
    "prefix_aware": Policy(
        "cache_aware", "kv", (("prefix-cache-scorer", 2.0), ("queue-scorer", 1.0)), "max-score-picker", True, False,
        "all three prefer the endpoint holding the longest prefix and fall back to load; the simulator "
        "subtracts cached tokens from queued tokens instead of weighing the two"),
    "session_affine": Policy(
        "sticky_least_loaded", "kv", (("session-affinity-scorer", 2.0), ("active-request-scorer", 1.0)),
        "max-score-picker", False, False,
        "vllm-router's sticky_least_loaded pins a session to the worker its first request went to (least "
        "loaded); llm-d's session-affinity-scorer pins by its session token (weight 2 outranks any load "
        "score of weight 1); Dynamo has no session mode: its kv router follows the prefix a session's turns "
        "share, which is prefix_aware, not session_affine"),
}


def policy(router: str) -> Policy:
    """The deployment form of the plan's `router`; a value the table lacks is a SpecError."""
    if router not in POLICIES:
        raise SpecError("", "router", "one of " + ", ".join(POLICIES), router)
    return POLICIES[router]


def scheduler_profile(name: str, router: str, filters: tuple[str, ...] = ()) -> dict:
    """An EPP scheduling profile: filters, the policy's weighted scorers, its picker."""
    pol = policy(router)
    refs = [{"pluginRef": f} for f in filters]
    refs += [{"pluginRef": t, "weight": w} for t, w in pol.scorers] + [{"pluginRef": pol.picker}]
    return {"name": name, "plugins": refs}


def scheduler_plugins(router: str) -> list[dict]:
    """The EPP plugin instances the policy's profiles refer to."""
    pol = policy(router)
    return [{"type": t} for t, _ in pol.scorers] + [{"type": pol.picker}]
