"""`rackplan plan --hardware A,B,C`: plan the same model, workload and SLOs on each hardware and
compare the chosen plans side by side: tokens/s per GPU, $/M output tokens, output tokens/s per MW,
J per output token (rackplan/economics.py), and the GPUs and NVLink domains (racks, HGX nodes)
that copies of each plan need to serve the target rate.

Each hardware gets its own plan file (`plan-<hardware>.yaml` beside --out) and is verified in the
simulator as a single-hardware `rackplan plan` run would be; the GPU count for the target rate
is copies of the verified deployment (one deployment simulated, its copies an extrapolation).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from rackplan.accuracy_band import headline_band
from rackplan.specs import SpecError, dump_yaml

from . import economy, planner


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
            d.update(target_rps=target_rps, copies_for_target=copies, gpus_for_target=copies * w.cand.gpus,
                     domains_for_target=math.ceil(copies * w.cand.gpus / req.hw.domain_size),
                     domain_size=req.hw.domain_size)
        return d


def hardware_list(text: str) -> list[str]:
    """'a,b,c' -> ['a', 'b', 'c'] (each once, none empty; SpecError otherwise)."""
    names = [h.strip() for h in text.split(",")]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise SpecError("", "--hardware", "comma-separated hardware names, each once", text)
    return names


def plan_each(args, build_request, progress=None) -> list[Row]:
    """One planning run per hardware of --hardware (a hardware with no feasible layout keeps its reason)."""
    from argparse import Namespace

    names = hardware_list(args.hardware)
    # --rate is the comparison's target; the throughput objective's plans take none (bad input before work)
    rate = None if args.objective == "throughput" else args.rate
    reqs = [build_request(Namespace(**{**vars(args), "hardware": n, "rate": rate})) for n in names]
    rows = []
    stem = Path(args.out)
    for name, req in zip(names, reqs):
        req.progress = progress
        out = str(stem.with_name(f"{stem.stem}-{Path(name).stem}{stem.suffix or '.yaml'}"))
        try:
            rows.append(Row(req.hw.name, planner.plan(req, name=Path(out).stem), out=out))
        except planner.NoFeasiblePlan as exc:
            rows.append(Row(req.hw.name, None, str(exc)))
        req.progress = None
    return rows


def table(rows: list[Row], target_rps: float | None) -> str:
    """The side-by-side table (plain text; report's compare.md has the same in markdown)."""
    cells = _cells(rows, target_rps)
    return "\n".join(f"{r[0]:<14s}" + "".join(f"{c:>15s}" for c in r[1:]) for r in cells)


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
                    str(d.get("gpus_for_target", "-")),
                    f"{d['domains_for_target']} x {d['domain_size']}" if "domains_for_target" in d else "-"])
    return out


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
    return out


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
