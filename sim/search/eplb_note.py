"""Why a plan has (or has not) EPLB redundant experts, in figures: its decode instance priced with
and without them under the workload's expert load (sim/expert_load.py), at the plan's estimated
batch per rank and mean context. The search tried both (sim/search/space.py); this names the
difference it chose on.
"""
from __future__ import annotations

from dataclasses import replace

from rackplan.specs import EPLBConfig, Layout

from ..cost.step import CostContext, decode_step
from ..expert_load import describe
from .combine import _tag
from .estimate import traffic_of
from .space import fits, required_redundant


def _alternative(model, hw, lay: Layout) -> Layout | None:
    """The decode layout with the other EPLB choice the search tries (one redundant slot per rank, or
    none), None when that one cannot run (experts not dividing, or not fitting in memory)."""
    if lay.eplb.redundant_experts:
        if required_redundant(model, lay.ep_size):
            return None  # the experts do not split evenly without redundant slots
        alt = replace(lay, eplb=EPLBConfig())
    else:
        alt = replace(lay, eplb=EPLBConfig(redundant_experts=lay.ep_size, policy="hierarchical"))
    return alt if fits(model, hw, alt) else None


def decode_figures(model, hw, profile, layout: Layout, load, batch: float, ctx_mean: float) -> tuple[float, float]:
    """(busiest EP rank's expected expert load over the mean, seconds per output token) of a decode
    step of `batch` sequences per rank at mean context `ctx_mean` under routing load `load`."""
    cx = CostContext(model, hw, layout, profile, load)
    step = decode_step(cx, batch, batch * ctx_mean)
    tokens_global = batch * layout.dp * float(layout.queries_per_step)
    return cx.step_model.imbalance(tokens_global), step.period_s / layout.tokens_per_step


def eplb_line(req, plan) -> str:
    """One line: the expert load, and the decode step's imbalance and time per output token with and
    without redundant experts (analytic, the step pricer the simulator uses)."""
    tr = traffic_of(req.workload, req.model)
    if not plan.decode or req.model.moe is None:
        return f"expert load: {describe(tr.skew)}"
    lay = plan.decode[0]
    batch = float(plan.predicted.get("est_batch_per_rank", lay.max_batch_per_rank))
    alt = _alternative(req.model, req.hw, lay)
    if lay.ep_size <= 1 or alt is None:
        return f"expert load: {describe(tr.skew)}; EPLB: no alternative for the decode instance {_tag(lay)}"

    (f0, t0), (f1, t1) = (decode_figures(req.model, req.hw, req.profile, x, tr.skew, batch, tr.ctx_mean)
                          for x in (lay, alt))
    mine, other = lay.eplb.redundant_experts, alt.eplb.redundant_experts
    verdict = "chosen" if mine else "rejected"
    with_r, without = ((f0, t0), (f1, t1)) if mine else ((f1, t1), (f0, t0))
    return (f"expert load: {describe(tr.skew)}; EPLB {verdict} for decode {_tag(lay)} "
            f"({max(mine, other)} redundant experts): busiest-rank expert load {with_r[0]:.3f}x the mean with "
            f"them vs {without[0]:.3f}x without, {with_r[1] * 1e3:.2f} vs {without[1] * 1e3:.2f} ms per output "
            f"token at {batch:.0f} sequences per rank (analytic step price)")
