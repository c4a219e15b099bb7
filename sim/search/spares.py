"""`plan --spares N` and `plan --availability A`: spare nodes held in the GPU budget, and a floor on
the plan's expected capacity over a year (rackplan/availability.py).

--spares N holds N GPUs (whole nodes) of the budget back: the search plans on the budget less them,
and plan.yaml keeps the whole budget, so its idle nodes are the spares a failed instance restarts on
(availability.spare_nodes); the cost and power figures pay for them and count their idle draw
(economics.on_budget). --availability A keeps, among the verified points, those whose expected
capacity with the budget's idle nodes as spares reaches A, and the objective chooses among them: a
pool of smaller instances loses less of the plan with one instance down, and idle nodes shorten
each failure from replace_hours to repair_hours. Where the search verified none that reaches A (its
branch and bound ranks by the objective alone), the front points reaching A are verified among
themselves. None reaching A is refused in one line that names the best one's figure.
"""
from __future__ import annotations

from dataclasses import replace

from rackplan import availability
from rackplan.specs import SpecError

from . import planner
from .front import Verified


def add_arguments(p) -> None:
    """plan's --spares and --availability."""
    from rackplan.args import non_negative_int, positive_float

    p.add_argument("--spares", type=non_negative_int, default=0, metavar="N",
                   help="GPUs of the budget held back as spare nodes (a multiple of the hardware's GPUs per node); "
                        "a failed instance restarts on one (rackplan/availability.py)")
    p.add_argument("--availability", type=positive_float, default=None, metavar="A",
                   help="least expected capacity over a year, e.g. 0.999: only deployments reaching it with the "
                        "budget's idle nodes as spares are chosen (sim/search/spares.py)")


def check(args, req: planner.Request) -> tuple[int, float | None]:
    """(spare GPUs, availability target) from the flags (SpecError naming the flag where they cannot act)."""
    spares, target = getattr(args, "spares", 0) or 0, getattr(args, "availability", None)
    hw = req.hw
    if (spares or target is not None) and hw.failures_per_gpu_year <= 0:
        raise SpecError(hw.name, "--spares" if spares else "--availability", "hardware with a failure rate "
                        "(failures_per_gpu_year; this one has none)")
    if spares % hw.gpus_per_node or spares >= req.num_gpus:
        raise SpecError("", "--spares", f"whole nodes of {hw.gpus_per_node} GPUs, fewer than the budget's "
                        f"{req.num_gpus}", spares)
    if target is not None and not 0 < target < 1:
        raise SpecError("", "--availability", "a share between 0 and 1, e.g. 0.999", target)
    return spares, target


def plan(req: planner.Request, name: str, spares: int, target: float | None) -> planner.Result:
    """The planning run on the budget less the spares, its plan on the whole budget, chosen among the
    points reaching `target` (planner.NoFeasiblePlan where none does)."""
    res = planner.plan(replace(req, num_gpus=req.num_gpus - spares), name=name)
    if not spares and target is None:
        return res
    prog, res.request.progress = res.request.progress, None
    full = replace(res.request, num_gpus=req.num_gpus)
    ok = [v for v in res.verified if v.passed]
    if target is not None:
        # the search verified for the objective alone, and its branch and bound may have passed over the
        # best deployment reaching the target: verify the front points reaching it among themselves
        res = _verify_reaching(res, full, name, target)
        ok = [v for v in res.verified if v.passed]
        caps = {id(v): capacity(full, v, name) for v in ok}
        reach = [v for v in ok if caps[id(v)] >= target]
        if not reach:
            best = max(ok, key=lambda v: caps[id(v)])
            nodes = availability.spare_nodes(to_plan(full, best, name), full.hw)
            raise planner.NoFeasiblePlan(
                f"no verified deployment reaches availability {target:.4%}: the best, {best.cand.summary}, expects "
                f"{caps[id(best)]:.4%} of its capacity over a year with {nodes} spare nodes; hold spare nodes with "
                f"--spares N (whole nodes of {full.hw.gpus_per_node} GPUs)")
        ok = reach
    win = planner.choose(full, ok)
    full.progress = prog
    return replace(res, request=full, winner=win, plan=to_plan(full, win, name))


def _verify_reaching(res: planner.Result, full: planner.Request, name: str, target: float) -> planner.Result:
    """`res` with the front points whose plan reaches `target` verified among themselves (the search's
    branch and bound, run on them alone: its bound compares only deployments the floor allows).
    Availability depends on the layout, not on the verified rate, so it is known before simulating."""
    done = {id(v.cand) for v in res.verified if v.check is not None}
    reaching = [c for c in res.front if id(c) not in done and capacity(full, Verified(c, None), name) >= target]
    if not reaching or not res.request.simulate:
        return res
    more = {id(v.cand): v for v in planner.verify(res.request, reaching)}
    return replace(res, verified=[more.get(id(v.cand), v) for v in res.verified])


def to_plan(req: planner.Request, v, name: str):
    """A verified point's plan on the request's (whole) budget, with its predicted figures."""
    return planner.to_plan(req, v.cand, name, planner.predicted_metrics(v))


def capacity(req: planner.Request, v, name: str) -> float:
    """Expected capacity over a year of a verified point's plan on the whole budget."""
    return availability.expected_capacity(to_plan(req, v, name), req.hw)


def line(res: planner.Result, target: float | None) -> list[str]:
    """The report line on the availability target (empty without one)."""
    if target is None:
        return []
    cap = availability.expected_capacity(res.plan, res.request.hw)
    nodes = availability.spare_nodes(res.plan, res.request.hw)
    return [f"availability target {target:.4%}: met, {cap:.4%} expected ({nodes} spare nodes; the objective chose "
            "among the verified deployments reaching it)"]
