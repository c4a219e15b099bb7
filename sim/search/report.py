"""The planner's report folder: report.md, pareto.csv, pareto.png and launch/ (rackplan.deploy)."""
from __future__ import annotations

import csv
from pathlib import Path

from rackplan.accuracy_band import headline_band
from rackplan.specs import SpecError

from ..cost.step import StepCost
from ..request_classes import class_lines
from . import economy, pareto_axis
from .eplb_note import eplb_line
from .estimate import Pricer, price_prefill, traffic_of
from .front import Verified
from .planner import AT_CAPACITY, Result, target_rate


def write_all(res: Result, folder: str | Path, axis: str = "gpu") -> list[Path]:
    """Write every report file into `folder` (launch files under launch/); returns their paths.
    The launch files are built first, so a plan vLLM cannot run fails before anything is written.
    `axis`: the figure the Pareto front is drawn on (sim/search/pareto_axis.py)."""
    launch, why_not = _launch_files(res)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "pareto.csv", folder / "pareto.png", folder / "report.md", folder / "report.html"]
    ax = None if axis == "gpu" else pareto_axis.axis(res.request, axis)
    write_csv(res, paths[0], ax)
    write_png(res, paths[1], ax)
    paths[2].write_text(markdown(res, sorted(launch), why_not, ax))
    from ..htmlreport import plan_page

    paths[3].write_text(plan_page(res))
    return paths + (_deploy().write(launch, folder / "launch") if launch else [])


def _deploy():
    """rackplan.deploy, imported where a report folder is written (a plan without --report prints its
    table from this module and never needs it: ~10 ms of its start)."""
    from rackplan import deploy

    return deploy


def _launch_files(res: Result) -> tuple[dict[str, str], str]:
    """The chosen plan's launch files, or none and why (a test model, a plan vLLM cannot place)."""
    r, deploy = res.request, _deploy()
    if not deploy.servable(r.model):
        return {}, (f"vLLM serves no checkpoint of {r.model.name} (launch files are written for "
                    f"{', '.join(sorted(deploy.FAMILIES))})")
    try:
        return deploy.build(deploy.Context(res.plan, r.model, r.hw, r.workload)), ""
    except SpecError as exc:
        return {}, f"vLLM cannot run this plan as laid out ({exc})"


CSV_FIELDS = ("summary", "gpus", "status", "request_rate", "tps_gpu", "tps_user", "sim_ttft_p90_s", "sim_tpot_p90_s",
              "sim_requests", "est_request_rate", "est_tps_gpu", "est_tps_user", "gap", "est_ttft_p90_s", "est_tpot_s",
              "est_capacity_rps", "batch_per_rank") + economy.CSV_FIELDS + ("on_front", "winner")


def _status(v: Verified | None) -> str:
    if v is None:
        return "estimate (not on the front)"
    if v.skipped:
        return "not simulated"
    return "estimate only" if v.check is None else ("verified" if v.passed else v.verdict().split(":")[0])


def write_csv(res: Result, path: Path, ax: pareto_axis.Axis | None = None) -> None:
    """The front and a deterministic sample of the other deployments (planner.SAMPLE). request_rate,
    tps_gpu and tps_user are the simulator's steady-state figures where verified (blank elsewhere);
    est_* are the analytic estimate, gap the verified tokens/s/GPU against it; the cost and power
    columns (sim/search/economy.py) are the simulator's figures where verified, else the estimate's at full load.
    With an axis (`--pareto-axis cost|power`), `on_<axis>_front` marks the front on that figure."""
    checks = {id(v.cand): v for v in res.verified}
    front = {id(c) for c in res.front}
    extra = {} if ax is None else {id(v.cand): 1 for v in pareto_axis.front(ax, pareto_axis.points(res))}
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS + (() if ax is None else (f"on_{ax.name}_front",)))
        w.writeheader()
        for c in res.candidates:
            v = checks.get(id(c))
            ok = v is not None and v.check is not None and v.passed
            k = v.check if v is not None else None
            sim = {"request_rate": f"{v.rate_rps:.4g}", "tps_gpu": f"{v.tps_gpu:.4g}", "tps_user": f"{v.tps_user:.4g}",
                   "gap": f"{v.gap:+.3f}"} if ok else {}
            if k is not None:
                sim.update(sim_ttft_p90_s=f"{k.metrics.get('ttft_p90_s', float('nan')):.4g}",
                           sim_tpot_p90_s=f"{k.metrics.get('tpot_p90_s', float('nan')):.4g}", sim_requests=k.requests)
            w.writerow({
                "summary": c.summary, "gpus": c.gpus, "status": _status(v), **sim,
                "est_request_rate": f"{c.rate_rps:.4g}", "est_tps_gpu": f"{c.tps_gpu:.4g}",
                "est_tps_user": f"{c.tps_user:.4g}", "est_ttft_p90_s": f"{c.ttft_p90_s:.4g}",
                "est_tpot_s": f"{c.tpot_s:.4g}", "est_capacity_rps": f"{c.capacity_rps:.4g}",
                "batch_per_rank": f"{c.batch_per_rank:.3g}", "on_front": int(id(c) in front),
                "winner": int(c is res.winner.cand),
                **economy.csv_row(res.request, v if ok else Verified(c, None)),
                **({} if ax is None else {f"on_{ax.name}_front": extra.get(id(c), 0)}),
            })


def write_png(res: Result, path: Path, axis: pareto_axis.Axis | None = None) -> None:
    """Where the simulator put the front points (verified: green, failed: red), each joined to its
    analytic estimate, which is drawn lighter with the estimated front and a sample of the others;
    against tokens/s per GPU, or `axis`'s figure with the front on it (sim/search/pareto_axis.py)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = axis.value if axis is not None else (lambda v: v.tps_gpu)

    def est(c):  # a candidate's estimate on the axis
        return y(Verified(c, None))
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    ax.scatter([c.tps_user for c in res.candidates], [est(c) for c in res.candidates], s=5, c="0.88",
               label="estimated deployments (sample)")
    if axis is None:
        fr = sorted(res.front, key=lambda c: c.tps_user)
        ax.plot([c.tps_user for c in fr], [c.tps_gpu for c in fr], "-", c="C0", alpha=0.3, lw=1,
                label="Pareto front (estimate)")
    else:
        on = pareto_axis.front(axis, pareto_axis.points(res))
        ax.plot([v.tps_user for v in on], [y(v) for v in on], "-", c="C0", alpha=0.5, lw=1,
                label=f"Pareto front on {axis.name} (simulator where verified)")
    sims = [v for v in res.verified if v.check is not None]
    ok = [v for v in sims if v.passed]
    for v in ok:
        ax.plot([v.cand.tps_user, v.tps_user], [est(v.cand), y(v)], "-", c="0.6", lw=0.6, zorder=2)
    ax.scatter([v.cand.tps_user for v in ok], [est(v.cand) for v in ok], s=18, facecolors="none",
               edgecolors="C0", alpha=0.45, label="estimate of a verified point", zorder=2)
    if ok:
        ax.scatter([v.tps_user for v in ok], [y(v) for v in ok], c="C2", label="simulator: verified", zorder=3)
    bad = [v for v in sims if not v.passed]  # no verified figure: marked at the estimate
    if bad:
        ax.scatter([v.cand.tps_user for v in bad], [est(v.cand) for v in bad], marker="x", c="C3", alpha=0.7,
                   label="estimate the simulator refutes", zorder=3)
    w = res.winner
    ax.scatter([w.tps_user], [y(w)], marker="*", s=220, c="gold", edgecolors="k", zorder=4,
               label="chosen (verified)" if w.check is not None else "chosen (estimate only)")
    tpot = res.request.slo.tpot_p90_s
    ax.axvline(1.0 / tpot, ls="--", c="0.5", lw=0.8, label=f"TPOT SLO {tpot * 1e3:g} ms (1 / TPOT)")
    ax.set_xlabel("output tokens/s per user")
    r = res.request
    title = f"{r.model.name} on {r.num_gpus} x {r.hw.name}: simulator at steady state vs estimate"
    if axis is None:
        ax.set_ylabel("output tokens/s per GPU")
    else:  # '$' escaped: matplotlib reads $...$ as maths
        import textwrap

        ax.set_ylabel(axis.label.replace("$", r"\$") + " (log scale)", fontsize=7)
        ax.set_yscale("log")  # a budget one copy barely fills costs many times the front's figure
        title += "\n" + "\n".join(textwrap.wrap(f"{axis.label}: {axis.source}", 150)).replace("$", r"\$")
    ax.set_title(title, fontsize=9 if axis is None else 6)
    ax.legend(fontsize=7, loc="upper right" if axis is None else "best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}"


def _row(i: int, v: Verified) -> str:
    c, k = v.cand, v.check
    ok = v.passed  # verified, or (simulator disabled) the estimate, marked as such
    nan = float("nan")
    sim = f"{_ms(k.metrics.get('ttft_p90_s', nan))} | {_ms(k.metrics.get('tpot_p90_s', nan))}" \
        if ok and k is not None else "- | -"
    name = c.summary.replace("|", "&#124;")  # a bare | would split the markdown cell
    figures = f"{v.rate_rps:.4g} | {v.tps_gpu:.0f} | {v.tps_user:.1f}" if ok else "- | - | -"
    gap = f"{v.gap:+.0%}" if ok and k is not None else "-"
    return (f"| {i} | {name} | {c.gpus} | {figures} | {sim} | {c.tps_gpu:.0f} | {c.tps_user:.1f} | {gap} | "
            f"{v.verdict()} |")


def breakdown_table(title: str, cost: StepCost) -> list[str]:
    """Op-by-op seconds of one step (largest first)."""
    ops = sorted(cost.breakdown().items(), key=lambda kv: -abs(kv[1]))
    lines = [f"**{title}**: {_ms(cost.seconds)} ms", "", "| op | ms | share |", "|---|---:|---:|"]
    for name, sec in ops:
        if abs(sec) > 0:
            lines.append(f"| {name} | {_ms(sec)} | {100 * sec / cost.seconds:.1f}% |")
    return lines + [""]


def _winner_steps(res: Result) -> list[str]:
    r, c = res.request, res.winner.cand
    tr = traffic_of(r.workload, r.model)
    pr = Pricer(r.model, r.hw, r.profile, tr.skew)
    lines = []
    for lay in c.decode + c.aggregated:
        batch = max(1.0, round(c.batch_per_rank))
        title = f"{lay.tag} decode step at {batch:g} sequences per rank (context {tr.ctx_mean:.0f})"
        if lay.speculation is not None:  # a step is not a token: TPOT is the step over the tokens it emits
            title += (f", {lay.speculation.acceptance_length:g} tokens per sequence per step "
                      f"({lay.speculation.num_tokens} draft)")
        lines += breakdown_table(title, pr.decode(lay, batch, tr.ctx_mean))
    for lay in c.prefill:
        unit = price_prefill(pr, lay, tr)
        per_step = max(1, int(lay.max_tokens_per_step // tr.new))
        lines += [f"Prefill instance {lay.tag}: {unit.capacity_rps:.2f} req/s at full steps, "
                  f"{_ms(unit.light_s)} ms for a lone prompt.", ""]
        title = f"{lay.tag} full prefill step ({per_step} x {tr.new:.0f} new tokens per rank)"
        lines += breakdown_table(title, pr.prefill(lay, (tr.new,) * per_step, tr.cached))
    return lines


def _why(res: Result) -> list[str]:
    """Why the winner wins: against the best other passing deployment."""
    w = res.winner
    others = [v for v in res.verified if v.passed and v is not w]
    if not others:
        return ["It is the only front point the simulator verified.", ""]
    key = {"min-gpus": lambda v: -v.cand.gpus, "latency": lambda v: v.tps_user}.get(
        res.request.objective, lambda v: v.tps_gpu)
    ru = max(others, key=key)
    return [f"Runner-up: {ru.cand.summary}: {ru.tps_gpu:.0f} tokens/s/GPU, {ru.tps_user:.1f} tokens/s/user on "
            f"{ru.cand.gpus} GPUs. The winner gives {w.tps_gpu / max(ru.tps_gpu, 1e-9):.2f}x the tokens/s/GPU "
            f"and {w.tps_user / max(ru.tps_user, 1e-9):.2f}x the tokens/s/user; its decode pool runs "
            f"{w.cand.batch_per_rank:.0f} sequences per rank at {_ms(w.cand.tpot_s)} ms per token in the estimate "
            f"against the {_ms(res.request.slo.tpot_p90_s)} ms TPOT SLO.", ""]


def _chosen(res: Result) -> list[str]:
    """The headline: the simulator's steady-state figures, the estimate beside them."""
    w, slo = res.winner, res.request.slo
    c = w.cand
    if w.check is None:
        return ["## Chosen (analytic estimate, not simulated)", "",
                f"**{c.summary}** on {c.gpus} GPUs: {c.rate_rps:.4g} req/s, {c.tps_gpu:.0f} output tokens/s/GPU, "
                f"{c.tps_user:.1f} tokens/s/user, **estimated only**.", ""]
    m = w.check.metrics
    return ["## Chosen (verified in the simulator at steady state)", "",
            f"**{c.summary}** on {c.gpus} GPUs: **{w.tps_gpu:,.0f} output tokens/s/GPU** and "
            f"**{w.tps_user:.1f} tokens/s/user** at {w.rate_rps:.4g} req/s, the highest rate at which the simulator "
            f"holds the SLOs (TTFT p90 {_ms(m['ttft_p90_s'])} ms <= {_ms(slo.ttft_p90_s)} ms, TPOT p90 "
            f"{_ms(m['tpot_p90_s'])} ms <= {_ms(slo.tpot_p90_s)} ms; every pool keeps up). Measured over "
            f"[{m['window_start_s']:.1f} s, {m['window_end_s']:.1f} s) of a {w.check.requests:,}-request run "
            f"({m['window_requests']:,.0f} requests in the window; warm-up and cool-down left out).", "",
            f"Analytic estimate of the same deployment: {c.tps_gpu:,.0f} tokens/s/GPU, {c.tps_user:.1f} tokens/s/user "
            f"at {c.rate_rps:.4g} req/s (cost-model pool capacity {c.capacity_rps:.4g} req/s): the verified figure "
            f"is {w.gap:+.0%} from it.", ""]


def cluster_fill(res: Result) -> str:
    """How copies of the chosen deployment fill the GPU budget (throughput objective; empty when it uses
    the whole budget): copies, idle GPUs, and the cluster's output tokens/s from the winner's own
    figures. One unit was simulated (or estimated), never its copies side by side: the cluster figure is
    that unit's times the copies, said so."""
    w, n = res.winner, res.request.num_gpus
    unit = w.cand.gpus
    copies = n // unit
    if res.request.objective not in AT_CAPACITY or copies < 1 or copies * unit == n:
        return ""
    what = "verified" if w.check is not None and w.passed else "estimated"
    tps = copies * w.tps_gpu * unit  # output tokens/s of the copies together
    if copies == 1:
        return (f"On the {n}-GPU budget: this deployment uses {unit} GPUs ({n - unit} idle): {tps:,.0f} output "
                f"tokens/s ({what}), {tps / n:,.0f} per GPU of the budget.")
    return (f"On the {n}-GPU budget: {copies} copies of this {unit}-GPU deployment use {copies * unit} GPUs "
            f"({n - copies * unit} idle) and would serve {copies * w.rate_rps:,.4g} req/s, {tps:,.0f} output "
            f"tokens/s, {tps / n:,.0f} per GPU of the budget: one deployment's {what} figures times {copies}, an "
            f"extrapolation (the copies were not simulated together).")


def _probes(res: Result) -> list[str]:
    """Every simulation of the chosen deployment (the bisection on rate)."""
    if res.winner.check is None:
        return []
    out = ["### How it was verified", "", "| run | req/s | requests | verdict | TTFT p90 ms | TPOT p90 ms | "
           "tok/s/GPU |", "|---:|---:|---:|---|---:|---:|---:|"]
    for i, p in enumerate(res.winner.check.probes, 1):
        m = p.metrics
        lat = f"{_ms(m['ttft_p90_s'])} | {_ms(m['tpot_p90_s'])}" if p.stable else "- | -"
        out.append(f"| {i} | {p.rate_rps:.4g} | {p.requests:,} | {p.verdict()} | {lat} | "
                   f"{m['output_tps_per_gpu']:,.0f} |")
    return out + [""]


def _front_section(res: Result) -> list[str]:
    shown = [v for v in _ranked(res) if not v.skipped]
    skipped = [v for v in res.verified if v.skipped]
    lines = ["## Front points (simulator at steady state, estimate beside it)", "",
             "| # | deployment | GPUs | req/s | tok/s/GPU | tok/s/user | TTFT p90 ms | TPOT p90 ms | est tok/s/GPU | "
             "est tok/s/user | gap | verdict |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    lines += [_row(i + 1, v) for i, v in enumerate(shown)] + [""]
    if skipped and res.request.objective != "throughput":  # sim/search/front.py verify_fixed
        lines += [f"{len(skipped)} other front points were not simulated: {skipped[0].skipped} (their estimates "
                  f"are in `pareto.csv`).", ""]
    elif skipped:
        lines += [f"{len(skipped)} other front points were not simulated: the cost model's capacity of their pools "
                  f"bounds them below the chosen deployment's verified tokens/s/GPU (branch and bound; their estimates "
                  f"are in `pareto.csv`).", ""]
    return lines


def markdown(res: Result, launch_files: list[str] = (), why_not: str = "", ax: pareto_axis.Axis | None = None) -> str:
    r = res.request
    n_sim = sum(v.check is not None for v in res.verified)
    sim_note = (f"{n_sim} of them simulated at steady state (each one's highest rate that holds the SLOs, by "
                "bisection on rate)") if res.simulated else \
        "**not simulated** (simulator unavailable or disabled): analytic estimate only"
    tr = traffic_of(r.workload, r.model)
    lines = [f"# rackplan plan: {r.model.name} on {r.num_gpus} x {r.hw.name}", "",
             f"Workload `{r.workload.name}` (ISL {tr.isl:.0f}, OSL {tr.osl:.0f}, "
             f"prefix hits {r.workload.prefix_hit_rate:.0%}); SLOs TTFT p90 <= {r.slo.ttft_p90_s:g} s, "
             f"TPOT p90 <= {_ms(r.slo.tpot_p90_s)} ms; objective **{r.objective}**.", "",
             f"Cost-model profile `{r.profile.name}`: {r.profile.describe()}.", "",
             f"Searched {res.num_layouts} instance shapes -> {res.num_candidates} deployments meeting the SLOs in "
             f"the estimate -> {len(res.front)} on the Pareto front, {sim_note}. (No wall-clock times here, so "
             "the same inputs give the same report: `rackplan plan --timings` prints them.)", ""]
    fill = cluster_fill(res)
    band = headline_band(res.plan, r.profile.name, r.workload).line()
    lines += _chosen(res) + [f"Accuracy of the headline: {band} (`python benchmarks/accuracy.py`).", ""]
    lines += [f"- {eplb_line(r, res.plan)}."] + [f"- {x} (simulated)." for x in _class_lines(res)] + [""]
    lines += ["## Cost and power", ""] + [f"- {x}" for x in economy.lines(res)] + [""]
    lines += ([fill, ""] if fill else []) + _probes(res) + _why(res) + economy.why(res) + _front_section(res)
    lines += _axis_section(res, ax)
    lines += _space_notes(res)
    lines += ["## Where the winner's time goes (op by op; analytic estimate, the cost model)", ""] + _winner_steps(res)
    lines += _profile_section(r.profile)
    return "\n".join(lines + _files_section(res, launch_files, why_not))


def _axis_section(res: Result, ax: pareto_axis.Axis | None, top: int = 12) -> list[str]:
    """Which figure pareto.png and pareto.csv draw the front on, where it comes from, and its points."""
    if ax is None:
        return []
    on = pareto_axis.front(ax, pareto_axis.points(res))
    planner_front = {id(c) for c in res.front}
    lines = [f"## Pareto front on {ax.name}", "", f"`pareto.png` and `pareto.csv` (column `on_{ax.name}_front`) draw "
             f"the front on **{ax.label}** against tokens/s per user: {ax.source}. The figures are the simulator's "
             "where it verified a point, the analytic estimate at full load elsewhere; the planner simulated the "
             "points of its tokens/s/GPU front.", "",
             f"| deployment | GPUs | tok/s/user | {ax.label} | tok/s/GPU | on the tok/s/GPU front | figures |",
             "|---|---:|---:|---:|---:|---|---|"]
    for v in on[:top]:
        val = f"${ax.value(v):,.3f}" if ax.name == "cost" else f"{ax.value(v):,.0f}"
        name = v.cand.summary.replace("|", "&#124;")  # a bare | would split the markdown cell
        lines.append(f"| {name} | {v.cand.gpus} | {v.tps_user:,.1f} | {val} | {v.tps_gpu:,.0f} | "
                     f"{'yes' if id(v.cand) in planner_front else 'no'} | "
                     f"{'simulated' if v.check is not None else 'estimate'} |")
    more = f"{len(on) - top} more in `pareto.csv`." if len(on) > top else ""
    return lines + ([more] if more else []) + [""]


def _class_lines(res: Result) -> list[str]:
    """The chosen deployment's per-class attainment (docs/workloads.md), where it was simulated."""
    w = res.winner
    return class_lines(w.check.metrics) if w is not None and w.check is not None else []


def _space_notes(res: Result) -> list[str]:
    """Shapes the search space left out, and why (e.g. EP sizes that do not split the experts)."""
    notes = res.space_notes
    if not notes:
        return []
    return ["## Left out of the search", ""] + [f"- {n}" for n in notes] + [""]


def _files_section(res: Result, launch_files: list[str], why_not: str) -> list[str]:
    """The report folder's files and how to run the launch files."""
    head = ("`report.html` (the front with a hover label per deployment, the chosen plan and its step by op; open it "
            "in a browser, no network needed), `pareto.csv` (the front with the simulator's figures beside the "
            "estimate, and a sample of the other estimated deployments), `pareto.png` (where the simulator put the "
            "front points; estimates lighter)")
    if not launch_files:
        return ["## Files", "", f"{head}. No `launch/`: {why_not or 'not built'}.", ""]
    names = ", ".join(f"`{n}`" for n in launch_files)
    return ["## Files", "", f"{head} and `launch/`, the vLLM deployment of the chosen plan: {names}.", "",
            _deploy().how_to_run(f"{res.plan.name}.yaml"), ""]


def _profile_section(prof) -> list[str]:
    """The profile's fit error per op class (what each op's price is worth) and its fallbacks."""
    if not prof.fit_error:
        return ["## Profile", "", f"`{prof.name}`: {prof.describe()}; no fit error recorded.", ""]
    out = ["## Profile fit error", "", f"`{prof.name}`: {prof.describe()}.", "",
           "| op class | MAPE % |", "|---|---:|"]
    out += [f"| {k} | {v:.1f} |" for k, v in prof.fit_error.items()]
    if prof.fallbacks:
        out += ["", "Not fitted (where these come from): "
                + "; ".join(f"{k}: {v}" for k, v in prof.fallbacks.items()) + "."]
    return out + [""]


def console_table(res: Result, top: int = 8) -> str:
    """A short text table for the terminal: the simulator's figures, the estimate beside them, and a line
    saying what the gap is. Under the latency objective the figures are per user (tokens/s/user, TTFT and
    TPOT p90), never requests/s or tokens/s/GPU: a concurrency-1 workload's per-GPU rate says nothing."""
    if res.request.objective == "latency":
        return _latency_table(res, top)
    ranked = _ranked(res)[:top]
    out = [f"{'deployment':58s} {'GPUs':>4s} {'req/s':>7s} {'tok/s/GPU':>9s} {'tok/s/user':>10s} "
           f"{'estimate':>9s} {'gap':>6s}  verdict"]
    for v in ranked:
        mark = "*" if v is res.winner else " "
        sim = v.simulated and v.passed
        out.append(f"{mark}{v.cand.summary:57s} {v.cand.gpus:4d} {_num(v.rate_rps, sim, '7.4g')} "
                   f"{_num(v.tps_gpu, sim, '9.0f')} {_num(v.tps_user, sim, '10.1f')} {v.cand.tps_gpu:9.0f} "
                   f"{(f'{v.gap:+.0%}' if sim else '-'):>6s}  {v.verdict()}")
    return "\n".join(out + [GAP_NOTE % ("tokens/s/GPU", "tokens/s/GPU")])


GAP_NOTE = ("(req/s, tok/s/GPU, tok/s/user: the simulator at steady state, '-' where not verified; estimate: the "
            "analytic estimate's %s; gap: verified / estimate - 1, so -60%% means the simulator found 60%% fewer "
            "%s than the estimate predicted, the queueing and tails the estimate leaves out)")


def user_gap(v: Verified) -> float:
    """Verified tokens/s/user against the estimate's (-0.3: 30% below)."""
    return v.tps_user / max(v.cand.tps_user, 1e-12) - 1.0


def _latency_table(res: Result, top: int) -> str:
    """console_table under the latency objective: per-user figures only."""
    out = [f"{'deployment':58s} {'GPUs':>4s} {'TTFT p90 ms':>11s} {'TPOT p90 ms':>11s} {'tok/s/user':>10s} "
           f"{'estimate':>9s} {'gap':>6s}  verdict"]
    nan = float("nan")
    for v in sorted(_ranked(res), key=lambda v: (not (v.simulated and v.passed), -v.tps_user))[:top]:
        sim = v.simulated and v.passed
        m = v.check.metrics if v.check is not None else {}
        out.append(f"{'*' if v is res.winner else ' '}{v.cand.summary:57s} {v.cand.gpus:4d} "
                   f"{_num(m.get('ttft_p90_s', nan) * 1e3, sim, '11.1f')} "
                   f"{_num(m.get('tpot_p90_s', nan) * 1e3, sim, '11.2f')} {_num(v.tps_user, sim, '10.1f')} "
                   f"{v.cand.tps_user:9.1f} {(f'{user_gap(v):+.0%}' if sim else '-'):>6s}  {v.verdict()}")
    note = GAP_NOTE.replace("req/s, tok/s/GPU, ", "TTFT, TPOT, ") % ("tokens/s/user", "tokens/s per user")
    return "\n".join(out + [note] + ([LOAD_NOTE] if target_rate(res.request) is None else []))


LOAD_NOTE = ("(this workload fixes a concurrency, not a request rate: the estimate prices each deployment at the "
             "capacity its SLOs allow, full batches, while the simulator runs it at the workload's concurrency, so "
             "the gap here is that difference of load, not an error of the cost model)")


def _num(x: float, shown: bool, fmt: str) -> str:
    width = int(fmt.split(".")[0])
    return format(x, fmt) if shown else "-".rjust(width)


def _ranked(res: Result) -> list[Verified]:
    """Verified points first (best tokens/s/GPU first), then failed ones, then skipped ones."""
    rank = {True: 0}
    return sorted(res.verified, key=lambda v: (rank.get(v.passed and v.simulated, 1 if v.simulated else 2),
                                               -v.tps_gpu, v.cand.summary))
