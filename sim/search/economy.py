"""Cost and power of the planner's front points (the arithmetic is rackplan/economics.py): the
cost and power objectives' ranking, and the lines, table cells and CSV columns the reports carry.

The cost objective ranks the verified front points by $/M output tokens on the GPU budget, the
power objective by output tokens/s per MW on it: copies of a deployment fill the budget, and the
GPUs left over are paid for and draw idle power (economics.on_budget). With a facility power budget
(`--power-mw`, a site's or a hall's megawatts) the copies must also stay within it, their draw and
the idle rest's: the power objective then serves the most output tokens/s within the megawatts,
the cost objective the cheapest tokens within them. Both plan at capacity, as the throughput
objective does, and choose among the points its verification simulated: branch and bound on
tokens/s/GPU (sim/search/front.py) leaves some points unsimulated, never chosen.

Why the power objective can choose another deployment than throughput: tokens/s per MW of one
deployment is its tokens/s/GPU over its per-GPU draw, and at capacity every GPU is busy (the
simulator's busy share is ~1), so per deployment the two rank alike. They part where a budget is
filled by whole copies: on a GPU budget the left-over GPUs draw idle power (30% of loaded here), on
a power budget a deployment's copies fit the megawatts unevenly, so a deployment with fewer
tokens/s/GPU whose copies fill the power serves more tokens within it.
"""
from __future__ import annotations

from rackplan import availability
from rackplan import economics as ec
from rackplan.specs import SpecError

from . import pairs
from .estimate import traffic_of

# pareto.csv columns (the figures of one deployment; *_budget: its copies on the GPU budget)
CSV_FIELDS = ("usd_per_m_output", "usd_per_m_input", "output_tps_per_mw", "joules_per_output_token", "busy_share",
              "usd_per_m_output_budget", "output_tps_per_mw_budget")


def prices(req) -> ec.Prices:
    """The run's prices (Request.prices, else the hardware's list price)."""
    return req.prices if req.prices is not None else ec.prices_for(req.hw)


def check_objective(req) -> None:
    """The cost objective needs a price, the power objective power figures, on every kind the run plans
    on (a mixed-hardware pair: both; SpecError: exit 2)."""
    for side, _ in pairs.sides(req):
        if req.objective == "cost" and prices(side).per_gpu_hour is None:
            raise SpecError(side.hw.name, "price_per_gpu_hour", "a price for --objective cost (the hardware YAML's, "
                            "--price-per-gpu-hour or --cost)")
        if req.objective in ("cost", "power") and side.hw.power_loaded_w <= 0:
            raise SpecError(side.hw.name, "power_loaded_w", f"power figures for --objective {req.objective}")


def of_point(req, v) -> ec.Economics | None:
    """One front point's figures (simulated where it ran; a mixed-hardware pair's per pool, sim/search/pairs.py)."""
    if req.prefill_side is not None:
        return pairs.figures(req, prices(req), v, traffic_of(req.workload).isl)
    return ec.of_verified(req.hw, prices(req), v, traffic_of(req.workload).isl)


def budget_of(req, v) -> ec.OnBudget | None:
    """The point's copies on the run's GPU budget (and its facility power budget, where given)."""
    eco = of_point(req, v)
    return None if eco is None else ec.on_budget(req.hw, eco, req.num_gpus, power_budget_w(req), pairs.idle_w(req, v))


def power_budget_w(req) -> float | None:
    """The run's facility power budget in W (None: none given)."""
    mw = getattr(req, "power_mw", None)
    return None if mw is None else mw * 1e6


def rank_key(req, v) -> tuple:
    """The larger the better: lowest $/M output tokens (cost) or most tokens/s per MW (power) on the
    budget (within a power budget: most output tokens/s within it), then tokens/s/GPU, fewer GPUs,
    the summary (deterministic)."""
    b = budget_of(req, v)
    if req.objective == "cost":
        head = -b.usd_per_m_output
    else:
        head = b.output_tps if b.power_budget_w is not None else b.output_tps_per_mw
    return (round(head, 9), round(v.tps_gpu, 6), -v.cand.gpus, v.cand.summary)


def choose(req, ok: list):
    """The cost / power objective's choice among the passing points (SpecError naming --power-mw when
    not one copy of any of them fits the power budget)."""
    best = max(ok, key=lambda v: rank_key(req, v))
    b = budget_of(req, best)
    if b is not None and b.copies == 0:
        least = min(budget_of(req, v).facility_power_w for v in ok if budget_of(req, v) is not None)
        need = min(of_point(req, v).facility_power_w + (req.num_gpus - v.cand.gpus) * _idle_w(req, v)
                   * prices(req).pue for v in ok)
        raise SpecError("", "--power-mw", f"at least {need / 1e6:.4g} MW: one copy of the smallest-drawing "
                        f"deployment with the idle rest of the {req.num_gpus} GPUs (idle alone {least / 1e6:.4g} MW)",
                        req.power_mw)
    return best


def _idle_w(req, v) -> float:
    """W per left-over GPU of the budget (a mixed-hardware pair's mean over its kinds)."""
    idle = pairs.idle_w(req, v)
    return req.hw.power_idle_w if idle is None else idle


def add_arguments(p) -> None:
    """plan's --power-mw (the cost and power objectives' facility power budget)."""
    from rackplan.args import positive_float

    p.add_argument("--power-mw", type=positive_float, metavar="MW", default=None,
                   help="facility power budget in MW (IT power x PUE) for --objective power (most output "
                   "tokens/s within it) and cost (cheapest tokens within it); the GPUs of the budget that no "
                   "copy uses draw idle power (sim/search/economy.py)")


def check_power_budget(args) -> float | None:
    """--power-mw acts on the cost and power objectives only (SpecError otherwise)."""
    from rackplan.args import refuse_unused

    mw = getattr(args, "power_mw", None)
    if args.objective not in ("cost", "power"):
        refuse_unused(f"plan --objective {args.objective}", {"--power-mw": mw},
                      "--objective power or cost (the budget the copies of a deployment must stay within)")
    return mw


def why(res) -> list[str]:
    """Why the cost / power objective's choice wins, against the tokens/s/GPU leader among the passing
    points (empty for the other objectives)."""
    req, w = res.request, res.winner
    if req.objective not in ("cost", "power"):
        return []
    ok = [v for v in res.verified if v.passed]
    lead = max(ok, key=lambda v: (round(v.tps_gpu, 6), round(v.tps_user, 6), -v.cand.gpus, v.cand.summary))
    bw, bl = budget_of(req, w), budget_of(req, lead)
    what = "$/M output tokens" if req.objective == "cost" else "output tok/s per MW"
    if bw.power_budget_w is not None:
        what = "$/M output tokens" if req.objective == "cost" else "output tok/s"
        where = (f"within {bw.power_budget_w / 1e6:g} MW of facility power and {req.num_gpus} GPUs; as many copies "
                 "as the megawatts hold, the idle rest of the GPUs drawing idle power")
    else:
        where = (f"on the {req.num_gpus}-GPU budget; copies of a deployment fill it, left-over GPUs are paid for "
                 "and draw idle power")
    if lead is w:
        return [f"Objective {req.objective}: the chosen deployment also has the most tokens/s/GPU, so it is the "
                f"throughput objective's choice too ({_budget_text(bw, w)}).", ""]
    return [f"Objective {req.objective} (best {what} {where}): **{w.cand.summary}**: {_budget_text(bw, w)}. "
            f"The throughput objective would choose {lead.cand.summary} ({lead.tps_gpu:,.0f} tok/s/GPU): "
            f"{_budget_text(bl, lead)}.", ""]


def _budget_text(b: ec.OnBudget, v) -> str:
    cost = f"${b.usd_per_m_output:,.3f}/M output tokens, " if b.usd_per_m_output is not None else ""
    return (f"{b.copies} cop{'y' if b.copies == 1 else 'ies'} of {v.cand.gpus} GPUs, {b.output_tps:,.0f} output "
            f"tok/s, {b.facility_power_w / 1e3:,.1f} kW facility, {cost}{b.output_tps_per_mw:,.0f} tok/s/MW, "
            f"{v.tps_gpu:,.0f} tok/s/GPU")


def lines(res) -> list[str]:
    """Sourced lines on the chosen deployment (console, report.md, plan.yaml's header): cost, power and
    availability."""
    w, req = res.winner, res.request
    kinds = (req.prefill_side.hw, req.hw) if req.prefill_side is not None else req.hw
    return (ec.lines(of_point(req, w), kinds, simulated=w.check is not None)
            + availability.lines(res.plan, res.request.hw))


def csv_row(req, v) -> dict[str, str]:
    """pareto.csv cells of one point (blank where not known)."""
    eco = of_point(req, v)
    if eco is None:
        return {}
    b = budget_of(req, v)
    row = {"output_tps_per_mw": f"{eco.output_tps_per_mw:.4g}", "joules_per_output_token":
           f"{eco.joules_per_output_token:.4g}", "busy_share": f"{eco.busy_share:.3f}",
           "output_tps_per_mw_budget": f"{b.output_tps_per_mw:.4g}"}
    if eco.usd_per_m_output is not None:
        row.update(usd_per_m_output=f"{eco.usd_per_m_output:.4g}", usd_per_m_input=f"{eco.usd_per_m_input:.4g}",
                   usd_per_m_output_budget=f"{b.usd_per_m_output:.4g}")
    return row


def to_dict(res) -> dict | None:
    """The chosen deployment's figures for --json (and, *_budget, its copies on the GPU budget)."""
    eco = of_point(res.request, res.winner)
    if eco is None:
        return None
    b = budget_of(res.request, res.winner)
    out = eco.to_dict() | {"copies_on_budget": float(b.copies), "output_tps_per_mw_budget": b.output_tps_per_mw}
    if b.usd_per_m_output is not None:
        out["usd_per_m_output_tokens_budget"] = b.usd_per_m_output
    if res.request.hw.failures_per_gpu_year > 0:
        out["expected_capacity"] = availability.expected_capacity(res.plan, res.request.hw)
    return out


def add_to_rows(args, base, rows) -> list[str]:
    """whatif: each simulated row's cost and power figures into its metrics (whatif.csv, --json), and
    the lines the table is followed by (the sources once, from the baseline)."""
    from .whatif import changed_specs

    out, first = ["cost and power per row ($/M output tokens, output tok/s per MW, J per output token):"], None
    for r in rows:
        if "error" in r.metrics or "num_gpus" not in r.metrics:
            continue
        hw = changed_specs(base, r.combo).hw
        eco = ec.of_metrics(hw, ec.prices_from_args(args, hw), r.metrics)
        if eco is None:
            continue
        first = first or (eco, hw)
        r.metrics.update(eco.to_dict())
        cost = f"${eco.usd_per_m_output:,.3f}" if eco.usd_per_m_output is not None else "-"
        out.append(f"  {r.label:48s} {cost:>10s} {eco.output_tps_per_mw:>12,.0f} {eco.joules_per_output_token:8.3f}")
    return out + ec.lines(*first) if first else []
