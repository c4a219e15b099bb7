"""The figure the report draws the Pareto front on (`plan --pareto-axis`): output tokens/s per GPU
(`gpu`, the default: the planner's own front), $ per million output tokens (`cost`) or output
tokens/s per MW of facility power (`power`), each against tokens/s per user.

Cost and power are the cost and power objectives' own figures (sim/search/economy.budget_of): the
deployment's copies on the run's GPU budget, the left-over GPUs paid for and drawing idle power, at
the run's price per GPU-hour, kWh price and PUE. So a deployment with fewer tokens/s/GPU whose
copies fill the budget can be cheaper per token than one that leaves GPUs idle: on the cost or power
front, though dominated on throughput. The front is computed on the drawn figure over the points the
report holds (the planner's front and its sample of the other estimated deployments): the
simulator's figures where it verified a point, the analytic estimate at full load elsewhere. The
points the planner simulated are still those of its tokens/s/GPU front (sim/search/planner.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rackplan.specs import SpecError

from . import economy
from .front import Verified
from .pareto import front as pareto_front

AXES = ("gpu", "cost", "power")


@dataclass(frozen=True)
class Axis:
    """One drawable figure: its name, label (with unit), where it comes from, its value of a point,
    and which way is better."""

    name: str
    label: str
    source: str
    value: Callable[[Verified], float]
    higher_is_better: bool = True

    def score(self, v: Verified) -> float:
        """The figure, larger the better (the front maximises it)."""
        return self.value(v) if self.higher_is_better else -self.value(v)


def axis(req, name: str) -> Axis:
    """The axis `name` of a planning run (SpecError naming --pareto-axis where its figures are not known)."""
    if name == "gpu":
        return Axis("gpu", "output tokens/s per GPU", "the simulator's tokens/s/GPU where verified, else the "
                    "analytic estimate", lambda v: v.tps_gpu)
    if name not in AXES:
        raise SpecError("", "--pareto-axis", f"one of {', '.join(AXES)}", name)
    p = economy.prices(req)
    if req.hw.power_loaded_w <= 0 or (name == "cost" and p.per_gpu_hour is None):
        raise SpecError(req.hw.name, "--pareto-axis", f"hardware with {'a price and ' if name == 'cost' else ''}"
                        "power figures (the hardware YAML's, --price-per-gpu-hour or --cost)", name)
    budget = f"on the {req.num_gpus}-GPU budget"
    fill = (f"copies of each deployment fill the {req.num_gpus}-GPU budget, left-over GPUs paid for and drawing "
            "idle power")
    power = (f"{req.hw.power_idle_w:,.0f}-{req.hw.power_loaded_w:,.0f} W per GPU idle-loaded ({req.hw.power_source}), "
             f"facility power = IT x PUE {p.pue:g}")
    if name == "cost":
        energy = f" + ${p.kwh:g}/kWh of facility energy ({power})" if p.kwh else " (energy included)"
        return Axis("cost", f"$ per M output tokens {budget}",
                    f"{fill}; ${p.per_gpu_hour:g}/GPU-h ({p.source}){energy}",
                    lambda v: economy.budget_of(req, v).usd_per_m_output, higher_is_better=False)
    return Axis("power", f"output tokens/s per MW {budget}", f"{fill}; {power}",
                lambda v: economy.budget_of(req, v).output_tps_per_mw)


def points(res) -> list[Verified]:
    """Every point the report holds, as drawn: the verified one where the simulator passed it, else its
    estimate (sim/search/report.write_csv's rule)."""
    checks = {id(v.cand): v for v in res.verified}
    out = []
    for c in res.candidates:
        v = checks.get(id(c))
        out.append(v if v is not None and v.check is not None and v.passed else Verified(c, None))
    return out


def front(ax: Axis, pts: list[Verified]) -> list[Verified]:
    """The points no other point beats on both tokens/s per user and the axis (tokens/s per user ascending)."""
    on = pareto_front(pts, lambda v: v.tps_user, ax.score)
    return sorted(on, key=lambda v: v.tps_user)


def add_arguments(p) -> None:
    """plan's --pareto-axis."""
    p.add_argument("--pareto-axis", choices=AXES, default="gpu",
                   help="the figure --report draws the Pareto front on (pareto.png, pareto.csv, report.md): "
                   "output tokens/s per GPU (gpu), $/M output tokens (cost) or output tokens/s per MW (power) on the "
                   "GPU budget, against tokens/s per user (sim/search/pareto_axis.py; default: %(default)s)")
