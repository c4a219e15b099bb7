"""`rackplan plan --hardware A,B,C`: plan the same model, workload and SLOs on each hardware and
compare the chosen plans side by side: tokens/s per GPU, $/M output tokens, output tokens/s per MW,
J per output token (rackplan/economics.py), and the GPUs and NVLink domains (racks, HGX nodes)
that copies of each plan need to serve the target rate.

Each hardware gets its own plan file (`plan-<hardware>.yaml` beside --out) and is verified in the
simulator as a single-hardware `rackplan plan` run would be; the GPU count for the target rate
is copies of the verified deployment (one deployment simulated, its copies an extrapolation).
`--hardware-pairs` adds mixed prefill/decode pairs as rows (sim/search/pairs.py; plan files
`plan-<prefill>-to-<decode>.yaml`), and the objective chooses one row across kinds and pairs.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from rackplan.accuracy_band import headline_band
from rackplan.specs import SpecError, dump_yaml

from . import economy, pairs, planner


@dataclass
class Row:
    """One hardware's chosen plan and its figures (None where no layout met the SLOs)."""

    hardware: str
    res: planner.Result | None
    why_not: str = ""
    out: str = ""

    def figures(self, target_rps: float | None) -> dict:
        """tok/s/GPU, $/M output and input tokens, tok/s/MW, J/token, GPUs and domains for the target."""
        if self.res is None:
            return {"hardware": self.hardware, "error": self.why_not}
        req, w = self.res.request, self.res.winner
        eco = economy.of_point(req, w)
        d = {"hardware": self.hardware, "plan": self.out, "summary": self.res.plan.summary, "gpus": w.cand.gpus,
             "verified": w.check is not None and w.passed, "request_rate": w.rate_rps, "output_tps_per_gpu": w.tps_gpu,
             "tps_per_user": w.tps_user}
        if eco is not None:
            d.update(eco.to_dict())
        if target_rps:
            copies = math.ceil(target_rps / w.rate_rps - 1e-9)
            d.update(target_rps=target_rps, copies_for_target=copies, gpus_for_target=copies * w.cand.gpus)
            d.update(_domains(req, w, copies))
        return d


def _domains(req, w, copies: int) -> dict:
    """NVLink domains the copies fill (a pair: of each kind, its prefill GPUs and its decode GPUs)."""
    s = req.prefill_side
    g_p, g_d = pairs.pool_gpus(w.cand) if s is not None else (0, w.cand.gpus)
    out = {"domains_for_target": math.ceil(copies * g_d / req.hw.domain_size), "domain_size": req.hw.domain_size}
    if s is not None:
        out.update(prefill_domains_for_target=math.ceil(copies * g_p / s.hw.domain_size),
                   prefill_domain_size=s.hw.domain_size)
    return out


def hardware_list(text: str) -> list[str]:
    """'a,b,c' -> ['a', 'b', 'c'] (each once, none empty; SpecError otherwise)."""
    names = [h.strip() for h in text.split(",")]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise SpecError("", "--hardware", "comma-separated hardware names, each once", text)
    return names


def plan_each(args, build_request, progress=None) -> list[Row]:
    """One planning run per hardware of --hardware, then per pair of --hardware-pairs (a row with no
    feasible layout keeps its reason)."""
    from argparse import Namespace

    names = hardware_list(args.hardware)
    # --rate is the comparison's target; the throughput objective's plans take none (bad input before work)
    a = Namespace(**{**vars(args), "rate": None if args.objective == "throughput" else args.rate})
    runs = [(build_request(Namespace(**{**vars(a), "hardware": n})), Path(n).stem) for n in names]
    if getattr(args, "hardware_pairs", None):
        pairs.check_args(args)
        runs += [(pairs.request(a, build_request, p, d), f"{Path(p).stem}-to-{Path(d).stem}")
                 for p, d in pairs.parse(args.hardware_pairs)]
    rows = []
    stem = Path(args.out)
    for req, tag in runs:
        req.progress = progress
        out = str(stem.with_name(f"{stem.stem}-{tag}{stem.suffix or '.yaml'}"))
        try:
            rows.append(Row(pairs.label(req), planner.plan(req, name=Path(out).stem), out=out))
        except planner.NoFeasiblePlan as exc:
            rows.append(Row(pairs.label(req), None, str(exc)))
        req.progress = None
    return rows


def table(rows: list[Row], target_rps: float | None) -> str:
    """The side-by-side table (plain text; report's compare.md has the same in markdown)."""
    cells = _cells(rows, target_rps)
    width = max(14, *(len(r[0]) + 1 for r in cells))  # a pair's 'prefill:decode' label is longer
    return "\n".join(f"{r[0]:<{width}s}" + "".join(f"{c:>15s}" for c in r[1:]) for r in cells)


def markdown(rows: list[Row], target_rps: float | None) -> str:
    cells = _cells(rows, target_rps)
    return "\n".join(["| " + " | ".join(cells[0]) + " |", "|---" + "|---:" * (len(COLUMNS) - 1) + "|"]
                     + ["| " + " | ".join(r) + " |" for r in cells[1:]])


COLUMNS = ("hardware", "tok/s/GPU", "$/M out", "$/M in", "tok/s/MW", "J/tok", "GPUs/plan", "req/s/plan",
           "GPUs for rate", "domains")


def _cells(rows: list[Row], target_rps: float | None) -> list[list[str]]:
    out = [list(COLUMNS)]
    for r in rows:
        d = r.figures(target_rps)
        if "error" in d:
            out.append([r.hardware, d["error"]] + [""] * (len(COLUMNS) - 2))
            continue
        out.append([r.hardware, f"{d['output_tps_per_gpu']:,.0f}", _money(d.get("usd_per_m_output_tokens")),
                    _money(d.get("usd_per_m_input_tokens")), _num(d.get("output_tps_per_mw"), ",.0f"),
                    _num(d.get("joules_per_output_token"), ".2f"), str(d["gpus"]), f"{d['request_rate']:.4g}",
                    str(d.get("gpus_for_target", "-")), _domain_cell(d)])
    return out


def _domain_cell(d: dict) -> str:
    if "domains_for_target" not in d:
        return "-"
    pre = (f"{d['prefill_domains_for_target']} x {d['prefill_domain_size']} + " if "prefill_domains_for_target" in d
           else "")
    return f"{pre}{d['domains_for_target']} x {d['domain_size']}"


def _money(x) -> str:
    return "-" if x is None else f"${x:,.3f}"


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def notes(rows: list[Row], target_rps: float | None) -> list[str]:
    """Where each figure comes from: the plans, their verification, the prices and power figures."""
    out = []
    if target_rps:
        out.append(f"GPUs for rate: copies of each chosen deployment to serve {target_rps:g} req/s (the deployment's "
                   "own figures times its copies: an extrapolation; a whole copy even where the rate needs less of it, "
                   "`--objective min-gpus --rate R` finds the fewest GPUs); domains: NVLink domains of that many GPUs "
                   "(NVL72 racks, HGX nodes).")
    for r in rows:
        if r.res is None:
            continue
        w = r.res.winner
        how = "verified in the simulator at steady state" if w.check is not None and w.passed else "estimate only"
        out.append(f"{r.hardware}: {r.res.plan.summary} ({how}) -> {r.out}")
        out += [f"  - {x}" for x in economy.lines(r.res)]
    return out + choice_lines(rows)


def _rank(r: Row) -> tuple:
    """The larger the better across rows, by the run's objective: the cost and power objectives' own
    ranking on the GPU budget (sim/search/economy.rank_key: every row plans on the same --gpus), else
    the objective's headline figure of the chosen deployment."""
    req, w = r.res.request, r.res.winner
    if req.objective in ("cost", "power"):
        return economy.rank_key(req, w)
    head = {"min-gpus": -w.cand.gpus, "latency": w.tps_user, "goodput": planner.goodput_per_gpu(w)}
    return (round(head.get(req.objective, w.tps_gpu), 9), round(w.tps_gpu, 6), -w.cand.gpus, r.hardware)


HEADLINE = {"throughput": "most output tok/s/GPU", "cost": "lowest $/M output tokens on the GPU budget",
            "power": "most output tok/s per MW on the GPU budget", "min-gpus": "fewest GPUs at the target rate",
            "latency": "most tokens/s/user at the target rate", "goodput": "most requests/s within SLO per GPU"}


def choice(rows: list[Row]) -> Row | None:
    """The row the run's objective chooses across hardware kinds and pairs (None: no row has a plan)."""
    ok = [r for r in rows if r.res is not None]
    return max(ok, key=_rank) if ok else None


def choice_lines(rows: list[Row]) -> list[str]:
    """The objective's choice across the rows and the figure it chose on, the runner-up beside it."""
    best = choice(rows)
    if best is None or len(rows) < 2:
        return []
    req = best.res.request
    what = HEADLINE[req.objective]
    if req.objective in ("cost", "power") and req.power_mw is not None:
        what = ("lowest $/M output tokens" if req.objective == "cost" else "most output tok/s") + \
            f" within {req.power_mw:g} MW"
    ranked = sorted((r for r in rows if r.res is not None), key=_rank, reverse=True)
    return [f"chosen ({req.objective}: {what}): {best.hardware}: {best.res.plan.summary} -> {best.out}; "
            + "; ".join(f"{r.hardware} {_headline(r)}" for r in ranked)]


def _headline(r: Row) -> str:
    """The figure a row is ranked on, in words."""
    req, w = r.res.request, r.res.winner
    if req.objective in ("cost", "power"):
        b = economy.budget_of(req, w)
        if req.objective == "cost":
            return f"${b.usd_per_m_output:,.3f}/M output tokens ({b.copies} x {w.cand.gpus} GPUs on {req.num_gpus})"
        if b.power_budget_w is not None:
            return f"{b.output_tps:,.0f} output tok/s ({b.facility_power_w / 1e3:,.1f} kW)"
        return f"{b.output_tps_per_mw:,.0f} output tok/s/MW ({b.copies} x {w.cand.gpus} GPUs on {req.num_gpus})"
    if req.objective == "min-gpus":
        return f"{w.cand.gpus} GPUs"
    if req.objective == "latency":
        return f"{w.tps_user:,.1f} tokens/s/user"
    if req.objective == "goodput":
        return f"{planner.goodput_per_gpu(w):.4g} req/s/GPU within SLO"
    return f"{w.tps_gpu:,.0f} tok/s/GPU"


def write(rows: list[Row], target_rps: float | None, folder: str | None) -> None:
    """Each hardware's plan file, and with --report the comparison as compare.md, compare.json, compare.png."""
    for r in rows:
        if r.res is not None:
            band = headline_band(r.res.plan, r.res.request.profile.name, r.res.request.workload)
            dump_yaml(r.res.plan, r.out, header=f"# {r.res.plan.description}\n# accuracy: {band.line()}\n"
                      + "".join(f"# {x}\n" for x in economy.lines(r.res)))
    if folder:
        d = Path(folder)
        d.mkdir(parents=True, exist_ok=True)
        bullets = [x if x.startswith("  ") else f"- {x}" for x in notes(rows, target_rps)]
        (d / "compare.md").write_text("# rackplan plan: hardware compared\n\n" + markdown(rows, target_rps) + "\n\n"
                                      + "\n".join(bullets) + "\n")
        (d / "compare.json").write_text(json.dumps([r.figures(target_rps) for r in rows], indent=2) + "\n")
        _chart([r.figures(target_rps) for r in rows if r.res is not None], d / "compare.png")


CHART = (("output_tps_per_gpu", "output tok/s per GPU"), ("usd_per_m_output_tokens", "$ per M output tokens"),
         ("output_tps_per_mw", "output tok/s per MW"), ("gpus_for_target", "GPUs for the target rate"))


def _chart(figs: list[dict], path: Path) -> None:
    """One panel per figure, one bar per hardware (a figure a hardware lacks is left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CHART), figsize=(3 * len(CHART), 3.2), dpi=110)
    for ax, (key, title) in zip(axes, CHART):
        have = [f for f in figs if f.get(key) is not None]
        ax.bar([f["hardware"] for f in have], [f[key] for f in have], color="C0")
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=6)
    fig.suptitle("rackplan plan: chosen plan per hardware (simulator-verified where marked in compare.md)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
