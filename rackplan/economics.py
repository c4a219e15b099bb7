"""What a deployment costs in money and power per token: $/M tokens, tokens/s per MW, J per token.

Pure arithmetic over a plan's served tokens/s, its GPUs and how busy they were (the simulator's busy
share per instance); every command that reports these figures calls `figures` and `lines` here.

Power model: each GPU draws its share of its system (board, CPUs, NICs, switches, fans or pumps;
`HardwareSpec.power_*_w`) linearly between idle and full load in its busy share, the linear
server power model of Fan, Weber and Barroso, "Power Provisioning for a Warehouse-sized Computer"
(ISCA 2007). A busy step is priced at the full-load draw, an upper bound for memory-bound decode
steps that run below the board's rated power. Facility power multiplies by the PUE.

Money: every GPU the plan uses is paid by the hour (a rental list price, or capex amortised over
its years plus opex), plus facility energy at a price per kWh where one is given (0 by default:
cloud list prices include power). $/M output tokens charges the whole cost to output tokens and
$/M input tokens the whole cost to input tokens (InferenceMAX's cost per million tokens convention),
so neither is a split of the other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from rackplan.specs import HardwareSpec
from rackplan.specs.fields import SpecError, check, from_dict, non_negative, positive, read_yaml

# Estimate: new liquid-cooled AI halls are quoted at PUE 1.1-1.3 (Google's 2024 fleet trailing-year
# PUE 1.09, Google Environmental Report 2024); the Uptime Institute 2024 survey's all-sites average
# is 1.56. Overridable with --pue.
DEFAULT_PUE = 1.2
HOURS_PER_YEAR = 8760.0
POWER_MODEL = "linear in busy share between idle and loaded (Fan, Weber & Barroso, ISCA 2007)"


@dataclass(frozen=True)
class CostSpec:
    """An owner's cost of one GPU (a cost YAML, `--cost`): capex amortised over its years, opex."""

    capex_per_gpu: float  # USD per GPU, its share of the system and network included
    amortisation_years: float
    opex_per_gpu_hour: float = 0.0  # USD: space, staff, support (energy is kwh_price)
    kwh_price: float = 0.0  # USD per kWh of facility energy
    pue: float = DEFAULT_PUE
    source: str = ""

    def __post_init__(self):
        non_negative(self.capex_per_gpu, "capex_per_gpu")
        positive(self.amortisation_years, "amortisation_years")
        non_negative(self.opex_per_gpu_hour, "opex_per_gpu_hour")
        non_negative(self.kwh_price, "kwh_price")
        check(self.pue >= 1.0, "pue", "a number >= 1", self.pue)

    @property
    def per_gpu_hour(self) -> float:
        """USD per GPU-hour: capex / (years x 8760 h) + opex."""
        return self.capex_per_gpu / (self.amortisation_years * HOURS_PER_YEAR) + self.opex_per_gpu_hour


@dataclass(frozen=True)
class Prices:
    """What a GPU-hour and a kWh cost, and where the figures come from."""

    per_gpu_hour: float | None  # USD (None: no price known)
    kwh: float = 0.0  # USD per kWh of facility energy on top of per_gpu_hour
    pue: float = DEFAULT_PUE
    source: str = ""


def load_cost(path: str | Path) -> CostSpec:
    """A cost YAML (CostSpec's fields); SpecError names the file and the field."""
    return from_dict(CostSpec, read_yaml(path), str(path))


def prices_for(hw: HardwareSpec, per_gpu_hour: float | None = None, kwh: float | None = None,
               pue: float | None = None, cost: CostSpec | None = None) -> Prices:
    """The run's prices: flags over a cost YAML over the hardware's list price (per_gpu_hour None: none known)."""
    if cost is not None:
        base = Prices(cost.per_gpu_hour, cost.kwh_price, cost.pue, cost.source or
                      f"cost YAML: capex ${cost.capex_per_gpu:,.0f}/GPU over {cost.amortisation_years:g} years")
    elif hw.price_per_gpu_hour > 0:
        base = Prices(hw.price_per_gpu_hour, 0.0, DEFAULT_PUE, hw.price_source)
    else:
        base = Prices(None)
    return Prices(base.per_gpu_hour if per_gpu_hour is None else per_gpu_hour,
                  base.kwh if kwh is None else kwh, base.pue if pue is None else pue,
                  base.source if per_gpu_hour is None else "--price-per-gpu-hour")


def gpu_power_w(hw: HardwareSpec, busy_share: float) -> float:
    """Watts one GPU's share of its system draws at a busy share in [0, 1] (module docstring)."""
    u = min(max(busy_share, 0.0), 1.0)
    return hw.power_idle_w + (hw.power_loaded_w - hw.power_idle_w) * u


@dataclass(frozen=True)
class Economics:
    """Cost and power of one deployment at its operating point."""

    gpus: int
    output_tps: float  # whole deployment, tokens/s
    busy_share: float  # GPU-weighted busy share of the instances (1.0 where not simulated)
    it_power_w: float  # the GPUs' systems, without facility overhead
    facility_power_w: float  # x PUE
    usd_per_hour: float | None  # None: no price known
    usd_per_m_output: float | None
    usd_per_m_input: float | None
    output_tps_per_mw: float  # facility power
    joules_per_output_token: float  # facility power
    prices: Prices

    def to_dict(self) -> dict[str, float]:
        """The figures as flat floats (plan.yaml's economics section, --json, CSV columns)."""
        out = {"busy_share": self.busy_share, "it_power_kw": self.it_power_w / 1e3,
               "facility_power_kw": self.facility_power_w / 1e3, "output_tps_per_mw": self.output_tps_per_mw,
               "joules_per_output_token": self.joules_per_output_token, "pue": self.prices.pue}
        if self.usd_per_hour is not None:
            out.update(usd_per_hour=self.usd_per_hour, usd_per_m_output_tokens=self.usd_per_m_output,
                       usd_per_m_input_tokens=self.usd_per_m_input, price_per_gpu_hour=self.prices.per_gpu_hour,
                       kwh_price=self.prices.kwh)
        return out


def figures(hw: HardwareSpec, prices: Prices, gpus: int, busy_share: float, output_tps: float,
            input_tps: float) -> Economics | None:
    """Cost and power of `gpus` GPUs serving `output_tps` / `input_tps` (whole plan, tokens/s) at a
    GPU-weighted `busy_share`; None where the hardware carries no power figures."""
    if hw.power_loaded_w <= 0:
        return None
    it_w = gpus * gpu_power_w(hw, busy_share)
    fac_w = it_w * prices.pue
    per_mw = output_tps / (fac_w / 1e6) if fac_w > 0 else math.inf
    j_tok = fac_w / output_tps if output_tps > 0 else math.inf
    if prices.per_gpu_hour is None:
        return Economics(gpus, output_tps, busy_share, it_w, fac_w, None, None, None, per_mw, j_tok, prices)
    usd_h = gpus * prices.per_gpu_hour + fac_w / 1e3 * prices.kwh
    return Economics(gpus, output_tps, busy_share, it_w, fac_w, usd_h, _per_million(usd_h, output_tps),
                     _per_million(usd_h, input_tps), per_mw, j_tok, prices)


def _per_million(usd_per_hour: float, tps: float) -> float:
    """USD per million tokens: cost of an hour / millions of tokens served in it."""
    return usd_per_hour / (tps * 3600.0 / 1e6) if tps > 0 else math.inf


def busy_share(plan, utilisation: dict[str, float]) -> float:
    """GPU-weighted busy share of a plan's instances: sum(busy x GPUs of the instance) / GPUs used.
    `utilisation` is the simulator's busy share per instance, named `pool[i].j` (sim/simulator.py)."""
    busy = 0.0
    for name, u in utilisation.items():
        pool, rest = name.split("[", 1)
        busy += u * getattr(plan, pool)[int(rest.split("]", 1)[0])].gpus
    return busy / plan.gpus_used


def pool_busy_shares(plan, utilisation: dict[str, float]) -> dict[str, tuple[int, float]]:
    """Per pool ("prefill", "decode", "aggregated"): its GPUs and their GPU-weighted busy share, from
    the simulator's busy share per instance (`pool[i].j`, as `busy_share`)."""
    gpus: dict[str, int] = {}
    busy: dict[str, float] = {}
    for name, u in utilisation.items():
        pool, rest = name.split("[", 1)
        g = getattr(plan, pool)[int(rest.split("]", 1)[0])].gpus
        gpus[pool] = gpus.get(pool, 0) + g
        busy[pool] = busy.get(pool, 0.0) + u * g
    return {p: (gpus[p], busy[p] / gpus[p]) for p in gpus}


def mixed_figures(parts: list[tuple[HardwareSpec, int, float, Prices]], output_tps: float,
                  input_tps: float) -> Economics | None:
    """Cost and power of a plan whose pools run on different hardware (sim/mixed.py): `parts` is
    (hardware, GPUs, busy share, that hardware's prices) per pool; each pool draws its own hardware's
    power at its own busy share and is paid at its own price; PUE and the kWh price are the run's
    (the first part's). The figures' `prices.per_gpu_hour` is the GPU-weighted mean."""
    if any(hw.power_loaded_w <= 0 for hw, *_ in parts):
        return None
    pue, kwh = parts[0][3].pue, parts[0][3].kwh
    gpus = sum(g for _, g, _, _ in parts)
    it_w = sum(g * gpu_power_w(hw, u) for hw, g, u, _ in parts)
    busy = sum(g * u for _, g, u, _ in parts) / gpus
    fac_w = it_w * pue
    per_mw = output_tps / (fac_w / 1e6) if fac_w > 0 else math.inf
    j_tok = fac_w / output_tps if output_tps > 0 else math.inf
    if any(p.per_gpu_hour is None for *_, p in parts):
        return Economics(gpus, output_tps, busy, it_w, fac_w, None, None, None, per_mw, j_tok, Prices(None, kwh, pue))
    gpu_usd_h = sum(g * p.per_gpu_hour for _, g, _, p in parts)
    source = " + ".join(f"{g} x {hw.name} at ${p.per_gpu_hour:g}/GPU-h ({p.source})" for hw, g, _, p in parts)
    usd_h = gpu_usd_h + fac_w / 1e3 * kwh
    return Economics(gpus, output_tps, busy, it_w, fac_w, usd_h, _per_million(usd_h, output_tps),
                     _per_million(usd_h, input_tps), per_mw, j_tok, Prices(gpu_usd_h / gpus, kwh, pue, source))


def lines(eco: Economics | None, hw: HardwareSpec | tuple[HardwareSpec, ...], simulated: bool = True) -> list[str]:
    """Sourced report lines for the figures (plain text: the table commands and report.md); `hw` a
    tuple: the hardware kinds of a mixed plan (each one's power source)."""
    kinds = hw if isinstance(hw, tuple) else (hw,)
    hw = kinds[0]
    if eco is None:
        return [f"cost and power: not known for {hw.name} (its hardware YAML has no power figures)"]
    load = (f"busy share {eco.busy_share:.1%} (simulated)" if simulated
            else "at full load (not simulated)")
    out = [f"power: {eco.it_power_w / 1e3:,.1f} kW IT, {eco.facility_power_w / 1e3:,.1f} kW facility "
           f"(PUE {eco.prices.pue:g}), {load}; "
           f"{eco.output_tps_per_mw:,.0f} output tok/s per MW, {eco.joules_per_output_token:,.2f} J per output "
           f"token; {POWER_MODEL}; " + "; ".join(f"{h.name}: {h.power_source}" if len(kinds) > 1 else h.power_source
                                                 for h in kinds)]
    if eco.usd_per_hour is None:
        out.append("cost: no price for this hardware; pass --price-per-gpu-hour or --cost")
    else:
        p = eco.prices
        energy = f" + ${p.kwh:g}/kWh facility energy" if p.kwh else " (energy included)"
        out.append(f"cost: ${eco.usd_per_m_output:,.3f} per M output tokens, ${eco.usd_per_m_input:,.3f} per M "
                   f"input tokens (each charged the whole ${eco.usd_per_hour:,.2f}/h); "
                   f"${p.per_gpu_hour:.4g}/GPU-h{' (mean)' if len(kinds) > 1 else ''}"
                   f"{energy}; {p.source}")
    return out


__all__ = ["CostSpec", "Economics", "Prices", "SpecError", "busy_share", "figures", "gpu_power_w", "lines",
           "load_cost", "prices_for"]


def of_metrics(hw: HardwareSpec, prices: Prices, metrics: dict) -> Economics | None:
    """The figures of a simulated (or estimated) run from its metrics: whole-plan tokens/s per GPU x
    GPUs; the busy share where the simulator measured it, else full load."""
    gpus = int(metrics["num_gpus"])
    return figures(hw, prices, gpus, float(metrics.get("gpu_busy_share", 1.0)),
                   float(metrics["output_tps_per_gpu"]) * gpus, float(metrics.get("input_tps_per_gpu", 0.0)) * gpus)


def of_plan_metrics(plan, hw: HardwareSpec, args, metrics: dict, utilisation: dict[str, float]) -> Economics | None:
    """A simulated run's figures from the run's flags (`prices_from_args`): `of_metrics`, or for a plan
    whose prefill pool runs on other hardware (Plan.prefill_hardware) `mixed_figures` per pool (each
    hardware's list price: --price-per-gpu-hour and --cost, one price, are refused there)."""
    if not plan.prefill_hardware:
        return of_metrics(hw, prices_from_args(args, hw), metrics)
    from rackplan.args import refuse_unused
    from rackplan.specs import pool_hardware

    refuse_unused("a mixed-hardware plan", {"--price-per-gpu-hour": args.price_per_gpu_hour, "--cost": args.cost},
                  "one price per hardware kind: the hardware YAMLs' list prices (edit a YAML to change one)")
    parts = []
    for pool, (g, u) in pool_busy_shares(plan, utilisation).items():
        pool_hw = pool_hardware(plan, hw, pool)
        parts.append((pool_hw, g, u, prices_from_args(args, pool_hw)))
    gpus = int(metrics["num_gpus"])
    return mixed_figures(parts, float(metrics["output_tps_per_gpu"]) * gpus,
                         float(metrics.get("input_tps_per_gpu", 0.0)) * gpus)


def of_verified(hw: HardwareSpec, prices: Prices, v, isl_mean: float) -> Economics | None:
    """The figures of a planner front point (sim/search/front.Verified): the simulator's where it ran,
    else the analytic estimate at full load (input tokens/s: its rate x the mean prompt length)."""
    if v.check is not None and "output_tps_per_gpu" in v.check.metrics:
        return of_metrics(hw, prices, v.check.metrics)
    c = v.cand
    return figures(hw, prices, c.gpus, 1.0, c.tps_gpu * c.gpus, c.rate_rps * isl_mean)


@dataclass(frozen=True)
class OnBudget:
    """A deployment's copies filling a GPU budget (a rack, a cluster), and where one is given a facility
    power budget (a site's megawatts): what an operator pays for and powers. GPUs left over draw idle
    power and are paid for all the same (a rented rack is rented whole, its GPUs stay powered)."""

    copies: int
    output_tps: float
    facility_power_w: float
    usd_per_hour: float | None
    usd_per_m_output: float | None
    output_tps_per_mw: float
    power_budget_w: float | None = None  # facility W the copies and the idle rest must stay within


def on_budget(hw: HardwareSpec, eco: Economics, budget: int, power_budget_w: float | None = None,
              idle_w: float | None = None) -> OnBudget:
    """`budget // eco.gpus` copies of the deployment and the idle rest: tokens/s, facility power, $/h,
    $/M output tokens, output tokens/s per MW (the cost and power objectives rank by these). With a
    facility power budget, as many copies as keep copies x the deployment's facility draw + the idle
    rest x idle draw x PUE within it (0 copies: the deployment does not fit the power at all). `idle_w`:
    W per left-over GPU (default `hw.power_idle_w`; a mixed-hardware pair's mean, sim/search/pairs.py)."""
    copies = max(1, budget // eco.gpus)
    pue = eco.prices.pue
    idle = hw.power_idle_w if idle_w is None else idle_w

    def facility_w(k: int) -> float:
        return (k * eco.it_power_w + max(0, budget - k * eco.gpus) * idle) * pue

    if power_budget_w is not None:
        while copies > 0 and facility_w(copies) > power_budget_w:
            copies -= 1
    tps = copies * eco.output_tps
    fac_w = facility_w(copies)
    per_mw = tps / (fac_w / 1e6) if fac_w > 0 else math.inf
    if eco.prices.per_gpu_hour is None:
        return OnBudget(copies, tps, fac_w, None, None, per_mw, power_budget_w)
    billed = max(budget, copies * eco.gpus)
    usd_h = billed * eco.prices.per_gpu_hour + fac_w / 1e3 * eco.prices.kwh
    return OnBudget(copies, tps, fac_w, usd_h, _per_million(usd_h, tps), per_mw, power_budget_w)


# -- command-line flags (simulate, plan, whatif) -------------------------------------------------
def add_arguments(p) -> None:
    """--price-per-gpu-hour, --kwh-price, --pue, --cost on an argparse parser."""
    from rackplan.args import non_negative_float, positive_float

    g = p.add_argument_group("cost and power (rackplan/economics.py)")
    g.add_argument("--price-per-gpu-hour", type=positive_float, metavar="USD",
                   help="price of one GPU-hour (default: the hardware YAML's dated list price)")
    g.add_argument("--kwh-price", type=non_negative_float, metavar="USD",
                   help="price of a kWh of facility energy, added to the GPU-hours (default 0: list prices "
                   "include power)")
    g.add_argument("--pue", type=positive_float, help=f"facility power / IT power (default {DEFAULT_PUE}, an estimate)")
    g.add_argument("--cost", metavar="YAML", help="an owner's cost: capex_per_gpu, amortisation_years, "
                   "opex_per_gpu_hour, kwh_price, pue (the flags above override it)")


def prices_from_args(args, hw: HardwareSpec) -> Prices:
    """The run's prices from its flags (SpecError for a bad --cost file or a --pue below 1)."""
    if args.pue is not None and args.pue < 1.0:
        raise SpecError("", "--pue", "a number >= 1", args.pue)
    given = [f for f, v in (("--price-per-gpu-hour", args.price_per_gpu_hour), ("--kwh-price", args.kwh_price),
                            ("--pue", args.pue), ("--cost", args.cost)) if v is not None]
    if given and hw.power_loaded_w <= 0:
        raise SpecError(hw.name, given[0], "hardware with power figures (power_loaded_w; this one has none, so no "
                        "cost or power is reported)")
    cost = load_cost(args.cost) if args.cost else None
    return prices_for(hw, args.price_per_gpu_hour, args.kwh_price, args.pue, cost)
