"""`rackplan plan --hardware-pairs`: the planner's search over mixed prefill/decode hardware pairs
(prefill on one kind, decode on another; sim/mixed.py runs such a plan).

The pipeline is the planner's (sim/search/planner.py); this module gives it the prefill side: the
prefill shapes are enumerated, memory-checked and priced on the prefill kind (its default profile),
the decode shapes on the decode kind, the KV cache crosses the slower scale-out NIC of the two at
the decode profile's efficiency (sim/cost/transfer.kv_link_between, as the simulator prices it),
pools are rate-matched as for one kind and the front is verified in the simulator on the mixed plan.

Pairs: `--hardware-pairs P:D,P:D` names each pair (prefill kind : decode kind);
`--hardware-pairs A,B,C` (no colon) is every ordered pair of two different kinds of the list
(n x (n - 1) pairs). The comparison (sim/search/compare.py) puts each kind of `--hardware` alone
beside the pairs, and the objective chooses across all of them.

GPU budget (`--gpus`): the GPUs of both kinds together. Cost and power: each pool at its own kind's
list price and its own draw at its simulated busy share (economics.mixed_figures); copies of a pair
fill the budget in its own mix, so left-over GPUs are paid at its GPU-weighted mean price and draw
its GPU-weighted mean idle power.
"""
from __future__ import annotations

from argparse import Namespace
from dataclasses import dataclass, replace

from rackplan import economics as ec
from rackplan.specs import HardwareSpec, Profile, SpecError, load_hardware, resolve_profile, spec_ref

from ..cost.transfer import KVLink, kv_link_between
from .space import min_gpus_for_weights

FLAG = "--hardware-pairs"
BUSY = "busy_share."  # + pool: a pool's simulated busy share in a mixed plan's probe metrics (verify.probe)


@dataclass(frozen=True)
class PrefillSide:
    """The prefill pool's hardware kind of a pair: its spec and profile, the names plan.yaml records,
    and its prices (its list price; the run's kWh price and PUE)."""

    hw: HardwareSpec
    profile: Profile
    hw_ref: str
    profile_ref: str
    prices: ec.Prices


def add_arguments(p) -> None:
    """plan's --hardware-pairs."""
    p.add_argument(FLAG, default=None, metavar="P:D,...|A,B,C",
                   help="also plan mixed hardware: prefill on kind P, decode on kind D, for each pair P:D given, or "
                   "every ordered pair of two kinds of A,B,C; compared beside each kind of --hardware alone "
                   "(GPU budget: both kinds together; sim/search/pairs.py)")


def parse(text: str) -> list[tuple[str, str]]:
    """'a:b,c:d' -> [(a, b), (c, d)]; 'a,b,c' -> every ordered pair of two different kinds (SpecError
    naming the flag for an empty or malformed entry, a kind paired with itself, a pair given twice)."""
    entries = [e.strip() for e in text.split(",")]
    expected = "prefill:decode hardware pairs (a:b,c:d) or a list of two or more kinds (a,b,c), each once"
    if any(not e for e in entries):
        raise SpecError("", FLAG, expected, text)
    if all(":" in e for e in entries):
        pairs = [tuple(x.strip() for x in e.split(":")) for e in entries]
    elif any(":" in e for e in entries) or len(entries) < 2 or len(set(entries)) != len(entries):
        raise SpecError("", FLAG, expected, text)
    else:
        pairs = [(a, b) for a in entries for b in entries if a != b]
    if any(len(p) != 2 or not all(p) or p[0] == p[1] for p in pairs) or len(set(pairs)) != len(pairs):
        raise SpecError("", FLAG, expected + " (a pair of two different kinds: one kind alone goes in --hardware)",
                        text)
    return [(p[0], p[1]) for p in pairs]


def check_args(args) -> None:
    """What a pair run cannot take (SpecError naming the flag)."""
    from rackplan.args import refuse_unused

    refuse_unused(f"plan {FLAG}", {"--profile": args.profile, "--price-per-gpu-hour": args.price_per_gpu_hour,
                                   "--cost": args.cost},
                  "one hardware kind (a pair prices each kind with its own default profile and list price)")
    refuse_unused(f"plan {FLAG}", {"--spares": args.spares or None, "--availability": args.availability},
                  "one hardware (spare nodes are whole nodes of one kind)")
    if getattr(args, "mode", "any") == "agg":
        raise SpecError("", "--mode", f"any or disagg with {FLAG} (a pair is a disaggregated plan)", args.mode)


def request(args, build_request, prefill: str, decode: str):
    """The planner Request of one pair: the decode kind's as `plan --hardware decode` builds it, the
    prefill side added, disaggregated deployments only."""
    for name in (prefill, decode):
        try:
            load_hardware(name)
        except SpecError as exc:
            raise SpecError("", FLAG, f"hardware names or YAML paths ({exc})", name) from None
    req = build_request(Namespace(**{**vars(args), "hardware": decode}))
    pre = load_hardware(prefill)
    side = PrefillSide(pre, resolve_profile(None, None, pre), spec_ref("hardware", prefill),
                       spec_ref("profiles", pre.default_profile), ec.prices_from_args(args, pre))
    return replace(req, prefill_side=side, space=replace(req.space, aggregated=False))


def sides(req) -> list:
    """(request that prices them, instance kinds) per hardware kind of a run: one kind prices every
    shape; a pair its prefill shapes on the prefill kind, its decode shapes on the decode kind."""
    s = req.prefill_side
    if s is None:
        return [(req, ("prefill", "decode", "agg"))]
    return [(replace(req, hw=s.hw, profile=s.profile, prices=s.prices), ("prefill",)), (req, ("decode",))]


def kv_link(req) -> KVLink | None:
    """A pair's KV link (the slower NIC of the two kinds, the decode profile's efficiency and
    handshake: sim/mixed.plan_kv_link's); None for one kind (NVLink or its own NIC)."""
    s = req.prefill_side
    return None if s is None else kv_link_between(req.model, s.hw, req.hw, req.profile)


def check_budget(req) -> None:
    """SpecError when the budget cannot hold one prefill instance of the prefill kind and one decode
    instance of the decode kind."""
    s = req.prefill_side
    (n_p, tag_p), (n_d, tag_d) = min_gpus_for_weights(req.model, s.hw), min_gpus_for_weights(req.model, req.hw)
    if n_p == 0 or n_d == 0 or n_p + n_d > req.num_gpus:
        raise SpecError("", "gpus", f"at least {n_p + n_d} GPUs: one prefill instance on {s.hw.name} ({tag_p}) and "
                        f"one decode instance on {req.hw.name} ({tag_d}) hold {req.model.name}'s weights"
                        if n_p and n_d else f"kinds whose GPUs can hold {req.model.name}", req.num_gpus)


def pool_gpus(cand) -> tuple[int, int]:
    """(prefill GPUs, decode GPUs) of a disaggregated deployment."""
    return sum(lay.total_gpus for lay in cand.prefill), sum(lay.total_gpus for lay in cand.decode)


def figures(req, prices: ec.Prices, v, isl_mean: float) -> ec.Economics | None:
    """A pair's front point's cost and power (economics.mixed_figures): each pool on its own kind at
    its simulated busy share (full load where not simulated), each at its own price."""
    g_p, g_d = pool_gpus(v.cand)
    m = v.check.metrics if v.check is not None and "output_tps_per_gpu" in v.check.metrics else None
    share = (lambda pool: float(m.get(BUSY + pool, 1.0))) if m is not None else (lambda pool: 1.0)
    s = req.prefill_side
    parts = [(s.hw, g_p, share("prefill"), s.prices), (req.hw, g_d, share("decode"), prices)]
    gpus = g_p + g_d
    input_tps = float(m["input_tps_per_gpu"]) * gpus if m is not None else v.cand.rate_rps * isl_mean
    return ec.mixed_figures(parts, v.tps_gpu * gpus, input_tps)


def idle_w(req, v) -> float | None:
    """W per left-over GPU of a pair's budget (its GPU-weighted mean idle draw); None for one kind."""
    s = req.prefill_side
    if s is None:
        return None
    g_p, g_d = pool_gpus(v.cand)
    return (g_p * s.hw.power_idle_w + g_d * req.hw.power_idle_w) / (g_p + g_d)


def label(req) -> str:
    """'prefill:decode' kind names of a pair, the kind's name alone otherwise."""
    s = req.prefill_side
    return req.hw.name if s is None else f"{s.hw.name}:{req.hw.name}"
