"""Cost and power of the planner's front points (the arithmetic is rackplan/economics.py): the
cost and power objectives' ranking, and the lines, table cells and CSV columns the reports carry.

The cost objective ranks the verified front points by $/M output tokens on the GPU budget, the
power objective by output tokens/s per MW on it: copies of a deployment fill the budget, and the
GPUs left over are paid for and draw idle power (economics.on_budget). Both plan at capacity, as
the throughput objective does, and choose among the points its verification simulated: branch
and bound on tokens/s/GPU (sim/search/front.py) leaves some points unsimulated, never chosen.
"""
from __future__ import annotations

from rackplan import availability
from rackplan import economics as ec
from rackplan.specs import SpecError

from .estimate import traffic_of

# pareto.csv columns (the figures of one deployment; *_budget: its copies on the GPU budget)
CSV_FIELDS = ("usd_per_m_output", "usd_per_m_input", "output_tps_per_mw", "joules_per_output_token", "busy_share",
              "usd_per_m_output_budget", "output_tps_per_mw_budget")


def prices(req) -> ec.Prices:
    """The run's prices (Request.prices, else the hardware's list price)."""
    return req.prices if req.prices is not None else ec.prices_for(req.hw)


def check_objective(req) -> None:
    """The cost objective needs a price, the power objective power figures (SpecError: exit 2)."""
    if req.objective == "cost" and prices(req).per_gpu_hour is None:
        raise SpecError(req.hw.name, "price_per_gpu_hour", "a price for --objective cost (the hardware YAML's, "
                        "--price-per-gpu-hour or --cost)")
    if req.objective in ("cost", "power") and req.hw.power_loaded_w <= 0:
        raise SpecError(req.hw.name, "power_loaded_w", f"power figures for --objective {req.objective}")


def of_point(req, v) -> ec.Economics | None:
    """One front point's figures (simulated where it ran)."""
    return ec.of_verified(req.hw, prices(req), v, traffic_of(req.workload).isl)


def budget_of(req, v) -> ec.OnBudget | None:
    eco = of_point(req, v)
    return None if eco is None else ec.on_budget(req.hw, eco, req.num_gpus)


def rank_key(req, v) -> tuple:
    """The larger the better: lowest $/M output tokens (cost) or most tokens/s per MW (power) on the
    budget, then tokens/s/GPU, fewer GPUs, the summary (deterministic)."""
    b = budget_of(req, v)
    head = -b.usd_per_m_output if req.objective == "cost" else b.output_tps_per_mw
    return (round(head, 9), round(v.tps_gpu, 6), -v.cand.gpus, v.cand.summary)


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
    if lead is w:
        return [f"Objective {req.objective}: the chosen deployment also has the most tokens/s/GPU, so it is the "
                f"throughput objective's choice too ({_budget_text(bw, w)}).", ""]
    return [f"Objective {req.objective} (best {what} on the {req.num_gpus}-GPU budget; copies of a deployment fill "
            f"it, left-over GPUs are paid for and draw idle power): **{w.cand.summary}**: {_budget_text(bw, w)}. "
            f"The throughput objective would choose {lead.cand.summary} ({lead.tps_gpu:,.0f} tok/s/GPU): "
            f"{_budget_text(bl, lead)}.", ""]


def _budget_text(b: ec.OnBudget, v) -> str:
    cost = f"${b.usd_per_m_output:,.3f}/M output tokens, " if b.usd_per_m_output is not None else ""
    return (f"{b.copies} cop{'y' if b.copies == 1 else 'ies'} of {v.cand.gpus} GPUs, {b.output_tps:,.0f} output "
            f"tok/s, {cost}{b.output_tps_per_mw:,.0f} tok/s/MW, {v.tps_gpu:,.0f} tok/s/GPU")


def lines(res) -> list[str]:
    """Sourced lines on the chosen deployment (console, report.md, plan.yaml's header): cost, power and
    availability."""
    w = res.winner
    return (ec.lines(of_point(res.request, w), res.request.hw, simulated=w.check is not None)
            + availability.lines(res.plan, res.request.hw))


def csv_row(req, v) -> dict[str, str]:
    """pareto.csv cells of one point (blank where not known)."""
    eco = of_point(req, v)
    if eco is None:
        return {}
    b = ec.on_budget(req.hw, eco, req.num_gpus)
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
    b = ec.on_budget(res.request.hw, eco, res.request.num_gpus)
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
