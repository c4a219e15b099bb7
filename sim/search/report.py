"""The planner's report folder: report.md, pareto.csv, pareto.png and launch/ (rackplan.deploy)."""
from __future__ import annotations

import csv
from pathlib import Path

from rackplan import deploy
from rackplan.specs import SpecError

from ..cost.step import StepCost
from .estimate import Pricer, price_prefill, traffic_of
from .planner import Result, Verified


def write_all(res: Result, folder: str | Path) -> list[Path]:
    """Write every report file into `folder` (launch files under launch/); returns their paths.
    The launch files are built first, so a plan vLLM cannot run fails before anything is written."""
    launch, why_not = _launch_files(res)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "pareto.csv", folder / "pareto.png", folder / "report.md"]
    write_csv(res, paths[0])
    write_png(res, paths[1])
    paths[2].write_text(markdown(res, sorted(launch), why_not))
    return paths + (deploy.write(launch, folder / "launch") if launch else [])


def _launch_files(res: Result) -> tuple[dict[str, str], str]:
    """The chosen plan's launch files, or none and why (a test model, a plan vLLM cannot place)."""
    r = res.request
    if not deploy.servable(r.model):
        return {}, (f"vLLM serves no checkpoint of {r.model.name} (launch files are written for "
                    f"{', '.join(sorted(deploy.FAMILIES))})")
    try:
        return deploy.build(deploy.Context(res.plan, r.model, r.hw, r.profile, r.workload)), ""
    except SpecError as exc:
        return {}, f"vLLM cannot run this plan as laid out ({exc})"


CSV_FIELDS = ("summary", "gpus", "est_request_rate", "est_tps_gpu", "est_tps_user", "est_ttft_p90_s",
              "est_tpot_s", "batch_per_rank", "on_front", "simulated", "passed", "sim_request_rate",
              "sim_ttft_p90_s", "sim_tpot_p90_s", "winner")


def write_csv(res: Result, path: Path) -> None:
    """The estimated front and a deterministic sample of the other deployments (planner.SAMPLE),
    with the simulator's verdict for front points."""
    checks = {id(v.cand): v for v in res.verified}
    front = {id(c) for c in res.front}
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for c in res.candidates:
            v = checks.get(id(c))
            k = v.check if v else None
            w.writerow({
                "summary": c.summary, "gpus": c.gpus, "est_request_rate": f"{c.rate_rps:.4g}",
                "est_tps_gpu": f"{c.tps_gpu:.4g}", "est_tps_user": f"{c.tps_user:.4g}",
                "est_ttft_p90_s": f"{c.ttft_p90_s:.4g}", "est_tpot_s": f"{c.tpot_s:.4g}",
                "batch_per_rank": f"{c.batch_per_rank:.3g}", "on_front": int(id(c) in front),
                "simulated": int(k is not None), "passed": "" if v is None else int(v.passed),
                "sim_request_rate": f"{k.rate_rps:.4g}" if k else "",
                "sim_ttft_p90_s": f"{k.metrics.get('ttft_p90_s', float('nan')):.4g}" if k else "",
                "sim_tpot_p90_s": f"{k.metrics.get('tpot_p90_s', float('nan')):.4g}" if k else "",
                "winner": int(c is res.winner.cand),
            })


def write_png(res: Result, path: Path) -> None:
    """Scatter of all deployments, the estimated front, simulator verdicts and the winner."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    ax.scatter([c.tps_user for c in res.candidates], [c.tps_gpu for c in res.candidates], s=6, c="0.75",
               label="estimated deployments (sample)")
    fr = sorted(res.front, key=lambda c: c.tps_user)
    ax.plot([c.tps_user for c in fr], [c.tps_gpu for c in fr], "-", c="C0", lw=1, label="Pareto front (estimate)")
    for passed, style, label in ((True, "o", "simulated: meets SLOs"), (False, "x", "simulated: misses SLOs")):
        pts = [v for v in res.verified if v.passed == passed]
        if pts:
            ax.scatter([v.tps_user for v in pts], [v.tps_gpu for v in pts], marker=style,
                       c="C2" if passed else "C3", label=label, zorder=3)
    w = res.winner
    ax.scatter([w.tps_user], [w.tps_gpu], marker="*", s=220, c="gold", edgecolors="k", zorder=4, label="chosen")
    ax.axvline(1.0 / res.request.slo.tpot_p90_s, ls="--", c="0.5", lw=0.8)
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per GPU")
    r = res.request
    ax.set_title(f"{r.model.name} on {r.num_gpus} x {r.hw.name}", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}"


def _row(i: int, v: Verified) -> str:
    c, k = v.cand, v.check
    sim = (f"{_ms(k.metrics.get('ttft_p90_s', float('nan')))} | {_ms(k.metrics.get('tpot_p90_s', float('nan')))}"
           if k else "- | -")
    verdict = "-" if k is None else ("meets" if v.passed else "misses " + ", ".join(k.misses))
    name = c.summary.replace("|", "&#124;")  # a bare | would split the markdown cell
    return (f"| {i} | {name} | {c.gpus} | {v.rate_rps:.3g} | {v.tps_gpu:.0f} | {v.tps_user:.1f} | "
            f"{_ms(c.ttft_p90_s)} | {_ms(c.tpot_s)} | {sim} | {verdict} |")


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
    tr = traffic_of(r.workload)
    pr = Pricer(r.model, r.hw, r.profile, tr.skew)
    lines = []
    for lay in c.decode + c.aggregated:
        batch = max(1.0, round(c.batch_per_rank))
        title = f"{lay.tag} decode step at {batch:g} sequences per rank (context {tr.ctx_mean:.0f})"
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
        return ["It is the only front point whose simulated tails meet both SLOs.", ""]
    key = {"min-gpus": lambda v: -v.cand.gpus, "latency": lambda v: v.tps_user}.get(
        res.request.objective, lambda v: v.tps_gpu)
    ru = max(others, key=key)
    return [f"Runner-up: {ru.cand.summary}: {ru.tps_gpu:.0f} tokens/s/GPU, {ru.tps_user:.1f} tokens/s/user on "
            f"{ru.cand.gpus} GPUs. The winner gives {w.tps_gpu / max(ru.tps_gpu, 1e-9):.2f}x the tokens/s/GPU "
            f"and {w.tps_user / max(ru.tps_user, 1e-9):.2f}x the tokens/s/user; its decode pool runs "
            f"{w.cand.batch_per_rank:.0f} sequences per rank at {_ms(w.cand.tpot_s)} ms per token (estimate) "
            f"against the {_ms(res.request.slo.tpot_p90_s)} ms TPOT SLO.", ""]


def markdown(res: Result, launch_files: list[str] = (), why_not: str = "") -> str:
    r, w = res.request, res.winner
    sim_note = "simulated at each point's target load" if res.simulated else \
        "**not simulated** (simulator unavailable or disabled): analytic estimate only"
    tr = traffic_of(r.workload)
    lines = [f"# rackplan plan: {r.model.name} on {r.num_gpus} x {r.hw.name}", "",
             f"Workload `{r.workload.name}` (ISL {tr.isl:.0f}, OSL {tr.osl:.0f}, "
             f"prefix hits {r.workload.prefix_hit_rate:.0%}); SLOs TTFT p90 <= {r.slo.ttft_p90_s:g} s, "
             f"TPOT p90 <= {_ms(r.slo.tpot_p90_s)} ms; objective **{r.objective}**.", "",
             f"Cost-model profile `{r.profile.name}`: {r.profile.describe()}.", "",
             f"Searched {res.num_layouts} instance shapes -> {res.num_candidates} deployments meeting the SLOs in "
             f"the estimate -> {len(res.front)} on the Pareto front, {sim_note}. (No wall-clock times here, so "
             "the same inputs give the same report: `rackplan plan --timings` prints them.)", "",
             "## Chosen", "", f"**{w.cand.summary}** on {w.cand.gpus} GPUs: {w.rate_rps:.3g} req/s, "
             f"{w.tps_gpu:.0f} output tokens/s/GPU, {w.tps_user:.1f} tokens/s/user.", ""]
    lines += _why(res)
    lines += ["## Front points (simulator verdicts)", "",
              "| # | deployment | GPUs | req/s | tok/s/GPU | tok/s/user | est TTFT p90 ms | est TPOT ms | "
              "sim TTFT p90 ms | sim TPOT p90 ms | verdict |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    ranked = sorted(res.verified, key=lambda v: (not v.passed, -v.tps_gpu))
    lines += [_row(i + 1, v) for i, v in enumerate(ranked)] + [""]
    lines += ["## Where the winner's time goes (op by op)", ""] + _winner_steps(res)
    lines += _profile_section(r.profile)
    return "\n".join(lines + _files_section(res, launch_files, why_not))


def _files_section(res: Result, launch_files: list[str], why_not: str) -> list[str]:
    """The report folder's files and how to run the launch files."""
    head = "`pareto.csv` (the front and a sample of the other estimated deployments), `pareto.png` (the front)"
    if not launch_files:
        return ["## Files", "", f"{head}. No `launch/`: {why_not or 'not built'}.", ""]
    names = ", ".join(f"`{n}`" for n in launch_files)
    return ["## Files", "", f"{head} and `launch/`, the vLLM deployment of the chosen plan: {names}.", "",
            deploy.how_to_run(f"{res.plan.name}.yaml"), ""]


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
    """A short text table for the terminal."""
    ranked = sorted(res.verified, key=lambda v: (not v.passed, -v.tps_gpu))[:top]
    out = [f"{'deployment':62s} {'GPUs':>4s} {'req/s':>7s} {'tok/s/GPU':>9s} {'tok/s/user':>10s}  verdict"]
    for v in ranked:
        verdict = "-" if v.check is None else ("meets SLOs" if v.passed else "misses " + ",".join(v.check.misses))
        mark = "*" if v is res.winner else " "
        out.append(f"{mark}{v.cand.summary:61s} {v.cand.gpus:4d} {v.rate_rps:7.3g} {v.tps_gpu:9.0f} "
                   f"{v.tps_user:10.1f}  {verdict}")
    return "\n".join(out)

