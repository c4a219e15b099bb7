"""report.html: one self-contained page a person can open from a report folder (no network, no script).

`rackplan plan --report DIR`, `rackplan whatif --out DIR` and `rackplan simulate --report FILE` write it:
the Pareto front with a hover label per deployment (layout, GPUs, tokens/s/GPU, tokens/s/user, verified
or estimated), the chosen plan, each pool's utilisation over the run, TTFT / TPOT CDFs, one step's cost
by op (stacked bars, the cost model's price: sim/commands/explain.py), what-if deltas with error bars.
Charts are inline SVG drawn by sim/svgplot.py; hover labels are SVG titles. Every figure says whether
it is the simulator's (verified, steady state) or the analytic estimate's.
"""
from __future__ import annotations

import math

import numpy as np

from . import svgplot
from .svgplot import PALETTE, Series, esc

CSS = ("body{font-family:sans-serif;max-width:1000px;margin:24px auto;color:#222}"
       "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}"
       "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}"
       "td:first-child,th:first-child{text-align:left}.note{color:#555;font-size:12px}svg.chart{display:block}")
CDF_POINTS = 200  # points of a drawn CDF (evenly spaced quantiles)


def page(title: str, intro: list[str], sections: list[tuple[str, str]]) -> str:
    """The whole HTML document: a title, intro paragraphs and (heading, body HTML) sections."""
    body = "".join(f"<p>{esc(p)}</p>" for p in intro)
    body += "".join(f'<section><h2>{esc(h)}</h2>{b}</section>' for h, b in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>{body}</body></html>\n")


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def table(head: list[str], rows: list[list]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{trs}</table>"


# -- charts ----------------------------------------------------------------------------------------------
def _point(summary: str, gpus: int, tps_gpu: float, tps_user: float, what: str, cost: str = "") -> str:
    return (f"{summary}\n{gpus} GPUs\n{tps_gpu:,.0f} output tokens/s/GPU\n{tps_user:,.1f} tokens/s/user\n"
            f"{cost}{what}")


def _cost(res, v) -> str:
    """A verified point's $/M output tokens and tok/s per MW (sim/search/economy.py) as a hover line."""
    from .search import economy

    eco = economy.of_point(res.request, v)
    if eco is None:
        return ""
    usd = f"${eco.usd_per_m_output:,.3f}/M output tokens, " if eco.usd_per_m_output is not None else ""
    return f"{usd}{eco.output_tps_per_mw:,.0f} output tok/s per MW\n"


def pareto_svg(res) -> str:
    """The planner's deployments: an estimated sample, the estimated front, where the simulator put the
    front points, and the chosen one; each point's hover label names it (sim/search/planner.Result)."""
    front = sorted(res.front, key=lambda c: c.tps_user)
    sims = [v for v in res.verified if v.check is not None]
    ok, bad = [v for v in sims if v.passed], [v for v in sims if not v.passed]
    w = res.winner
    series = [
        Series("estimated deployments (sample)", [(c.tps_user, c.tps_gpu, _point(c.summary, c.gpus, c.tps_gpu,
               c.tps_user, "analytic estimate")) for c in res.candidates], "#c8c8c8", size=2.5),
        Series("Pareto front (estimate)", [(c.tps_user, c.tps_gpu, _point(c.summary, c.gpus, c.tps_gpu, c.tps_user,
               "analytic estimate, on the front")) for c in front], PALETTE[0], "ring", 4, line=True),
        Series("simulator: verified", [(v.tps_user, v.tps_gpu, _point(v.cand.summary, v.cand.gpus, v.tps_gpu,
               v.tps_user, f"verified in the simulator at {v.rate_rps:.4g} req/s", _cost(res, v))) for v in ok],
               PALETTE[2], size=5),
        Series("estimate the simulator refutes", [(v.cand.tps_user, v.cand.tps_gpu, _point(
               v.cand.summary, v.cand.gpus, v.cand.tps_gpu, v.cand.tps_user, f"estimate; simulator: {v.verdict()}"))
               for v in bad], PALETTE[3], "x", 4),
        Series("chosen" + (" (verified)" if w.check is not None else " (estimate only)"),
               [(w.tps_user, w.tps_gpu, _point(w.cand.summary, w.cand.gpus, w.tps_gpu, w.tps_user, "chosen, " + (
                   "verified" if w.check is not None else "estimate only"), _cost(res, w)))], "gold", "star", 11),
    ]
    tpot = res.request.slo.tpot_p90_s
    return svgplot.scatter("Deployments: output tokens/s per GPU against tokens/s per user", "output tokens/s per "
                           "user (log scale)", "output tokens/s per GPU", [s for s in series if s.points],
                           log_x=True, vline=(1.0 / tpot, f"TPOT SLO {tpot * 1e3:g} ms (1 / TPOT)"))


def step_svg(steps) -> str:
    """One step of each pool, stacked by op (ms): explain.PoolStep rows, the cost model's price."""
    if not steps:
        return note("no step priced: the workload has trace lengths (no mean request to price a step at)")
    names = sorted({r.name for s in steps for r in s.rows},
                   key=lambda n: -max(abs(r.seconds) for s in steps for r in s.rows if r.name == n))
    series = [(n, [next((r.seconds * 1e3 for r in s.rows if r.name == n), 0.0) for s in steps]) for n in names]
    cats = [f"{s.pool} {s.layout}, {s.period_s * 1e3:,.2f} ms" for s in steps]
    return svgplot.bars("One step of each pool by op (analytic estimate, the cost model)", "ms per step", cats,
                        series, stacked=True, unit=" ms")


def utilisation_svg(result) -> str:
    """Each pool's busy share over the whole run (SimResult.busy_over_time), the window marked."""
    if not result.busy_over_time:
        return note("no utilisation series for this run")
    edges, pools = result.busy_over_time
    mid = (np.asarray(edges[:-1]) + np.asarray(edges[1:])) / 2
    series = [Series(f"{pool} pool", [(float(t), 100 * float(b), f"{pool}: {100 * b:.0f}% busy at {t:,.1f} s")
                                      for t, b in zip(mid, share)], PALETTE[i], "dot", 2.5, line=True)
              for i, (pool, share) in enumerate(pools.items())]
    w = result.window
    svg = svgplot.scatter("Utilisation of each pool over the run (simulator)", "simulated time (s)",
                          "busy share of the pool's instances (%)", series)
    return svg + note(f"Measurement window [{w.start_s:,.1f} s, {w.end_s:,.1f} s): warm-up before it and "
                      "cool-down after it are left out of every figure." if w else "")


def _cdf(values: np.ndarray, scale: float, name: str, unit: str, colour: str) -> Series:
    v = np.sort(values[np.isfinite(values)]) * scale
    if not len(v):
        return Series(name, [], colour)
    qs = np.linspace(0.0, 1.0, min(CDF_POINTS, len(v)))
    xs = np.quantile(v, qs)
    return Series(name, [(float(x), 100 * float(q), f"{name}: {100 * q:.0f}% of requests <= {x:,.4g} {unit}")
                         for x, q in zip(xs, qs)], colour, "none", line=True)


def latency_svgs(result, slo) -> str:
    """TTFT and TPOT CDFs of the run's finished requests (simulator), the SLOs marked."""
    out = ""
    for arr, name, scale, unit, limit in ((result.ttft_s, "TTFT", 1e3, "ms", slo.ttft_p90_s * 1e3),
                                          (result.tpot_s, "TPOT", 1e3, "ms", slo.tpot_p90_s * 1e3)):
        s = _cdf(np.asarray(arr, float), scale, name, unit, PALETTE[0] if name == "TTFT" else PALETTE[1])
        if s.points:
            out += svgplot.scatter(f"{name} distribution (simulator, every finished request)", f"{name} ({unit})",
                                   "share of requests (%)", [s], vline=(limit, f"{name} p90 SLO {limit:g} {unit}"))
    return out or note("no finished request to draw")


def whatif_svg(baseline, rows) -> str:
    """What-if deltas against the baseline (%), +- 2 standard errors where measured."""
    from .search import whatif

    shown = ("ttft_p90_s", "tpot_p90_s", "output_tps_per_gpu", "tps_per_user")
    deltas = [whatif.deltas(r.metrics, baseline.metrics) for r in rows]
    errors = [whatif.delta_errors(r.metrics, baseline.metrics) for r in rows]
    series = [(m, [100 * d.get(m, math.nan) for d in deltas]) for m in shown]
    err = [[100 * whatif.NOISE_Z * e.get(m, math.nan) for e in errors] for m in shown]
    notes = ["unstable: " + r.metrics.get("saturated", "") + " saturates" if not whatif.stable(r.metrics) else ""
             for r in rows]
    return svgplot.bars("What-if: change against the baseline (simulator at steady state)", "change (%)",
                        [r.label for r in rows], series, stacked=False, errors=err, unit="%", notes=notes)


# -- pages -------------------------------------------------------------------------------------------------
def plan_page(res) -> str:
    """report.html of `rackplan plan --report`."""
    from .commands.explain import explain
    from .search import economy
    from .search.estimate import traffic_of

    r, w = res.request, res.winner
    what = "verified in the simulator at steady state" if w.check is not None else "analytic estimate, not simulated"
    chosen = [f"Chosen: {w.cand.summary} on {w.cand.gpus} GPUs: {w.tps_gpu:,.0f} output tokens/s/GPU, "
              f"{w.tps_user:,.1f} tokens/s/user at {w.rate_rps:.4g} req/s ({what}); analytic estimate "
              f"{w.cand.tps_gpu:,.0f} tokens/s/GPU."]
    rows = [[v.cand.summary, v.cand.gpus, f"{v.tps_gpu:,.0f}" if v.simulated and v.passed else "-",
             f"{v.tps_user:,.1f}" if v.simulated and v.passed else "-", f"{v.cand.tps_gpu:,.0f}",
             f"{v.cand.tps_user:,.1f}", v.verdict()] for v in res.verified]
    steps = explain(res.plan, r.model, r.hw, r.profile, traffic_of(r.workload, r.model))
    return page(f"rackplan plan: {r.model.name} on {r.num_gpus} x {r.hw.name}",
                [f"Workload {r.workload.name}; SLOs TTFT p90 <= {r.slo.ttft_p90_s:g} s, TPOT p90 <= "
                 f"{r.slo.tpot_p90_s * 1e3:g} ms; objective {r.objective}; profile {r.profile.name}: "
                 f"{r.profile.describe()}."] + chosen + economy.lines(res),
                [("Pareto front (hover a point for its deployment)", pareto_svg(res)),
                 ("Front points: simulator against the estimate", table(
                     ["deployment", "GPUs", "tok/s/GPU (sim)", "tok/s/user (sim)", "est tok/s/GPU", "est tok/s/user",
                      "verdict"], rows)),
                 ("Where the chosen plan's step time goes", step_svg(steps))])


def simulate_page(plan, workload, profile, result, steps) -> str:
    """report.html of `rackplan simulate --report`."""
    m = result.metrics
    head = [f"{plan.model} on {plan.hardware}, {plan.summary} ({int(m['num_gpus'])} GPUs); workload "
            f"{workload.name}; profile {profile.name}: {profile.describe()}.",
            f"Simulator at steady state ({result.stability.describe()}): {m['output_tps_per_gpu']:,.0f} output "
            f"tokens/s/GPU at {m['offered_rps']:,.4g} req/s offered; " + (
                f"{m['tps_per_user']:,.1f} tokens/s/user (median), TTFT p90 {m['ttft_p90_s'] * 1e3:,.1f} ms, TPOT "
                f"p90 {m['tpot_p90_s'] * 1e3:,.2f} ms." if result.stable else
                "latency percentiles not shown: a saturated pool's only grow with the run's length.")]
    return page(f"rackplan simulate: {plan.name}", head,
                [("Utilisation over the run", utilisation_svg(result)),
                 ("Latency distributions", latency_svgs(result, plan.slo)),
                 ("Where a step's time goes", step_svg(steps))])


def whatif_page(plan, baseline, rows, steps) -> str:
    """report.html of `rackplan whatif --out`."""
    from .search import whatif

    def cells(r):
        d, e = whatif.deltas(r.metrics, baseline.metrics), whatif.delta_errors(r.metrics, baseline.metrics)
        return [r.label] + [f"{100 * d[k]:+.1f}% +- {100 * whatif.NOISE_Z * e[k]:.1f}%"
                            + (" (noise)" if whatif.in_noise(d[k], e[k]) else "") if k in e else
                            (f"{100 * d[k]:+.1f}%" if k in d else "-")
                            for k in ("ttft_p90_s", "tpot_p90_s", "output_tps_per_gpu", "tps_per_user")]
    return page(f"rackplan whatif: {plan.name}", [f"{plan.model} on {plan.hardware}, {plan.summary}. Every row is "
                "simulated at steady state; deltas carry +- 2 standard errors of the two runs (batch means), "
                "'(noise)' where the change is inside them."],
                [("Deltas against the baseline", whatif_svg(baseline, rows)),
                 ("Deltas (table)", table(["change", "TTFT p90", "TPOT p90", "tok/s/GPU", "tok/s/user"],
                                          [cells(r) for r in rows])),
                 ("Where the baseline's step time goes", step_svg(steps))])


def sweep_page(rows: list[dict]) -> str:
    """report.html of `rackplan sweep`: tokens/s/GPU against tokens/s/user, one point per cell that
    measured both (hover: the cell's axes and where its figures come from), grouped as sweep.png groups
    them, and the whole table."""
    from .sweep import COLUMNS
    from .sweep import groups as by_group

    groups = by_group(rows)

    def label(r: dict) -> str:
        axes = ", ".join(f"{k} {r[k]}" for k in ("workload", "gpus", "rate", "change") if r.get(k) not in ("", None))
        return (f"cell {r['cell']}: {r.get('summary') or r['plan']}\n{axes}\n{r['output_tps_per_gpu']:,.0f} output "
                f"tokens/s/GPU\n{r['tps_per_user']:,.1f} tokens/s/user\n{r.get('source', '')}")

    series = [Series(name, [(r["tps_per_user"], r["output_tps_per_gpu"], label(r)) for r in rs],
                     PALETTE[i % len(PALETTE)]) for i, (name, rs) in enumerate(groups.items())]
    sources = sorted({r["source"] for r in rows if r.get("source")})
    chart = (svgplot.scatter("output tokens/s per GPU against tokens/s per user", "output tokens/s per user",
                     "output tokens/s per GPU", series) if series else note("no cell measured both figures"))
    return page(f"rackplan sweep: {len(rows)} cells",
                [f"Each point is one cell; hover it for its axes. Figures from: {'; '.join(sources) or 'no results'}."],
                [("Cells (hover a point for its cell)", chart),
                 ("Every cell (sweep.csv)", table(list(COLUMNS), [[r.get(c, "") for c in COLUMNS] for r in rows]))])
