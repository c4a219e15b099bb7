"""What-if studies: change hardware, host (CPU) settings, model or profile fields, simulate every
combination of the changes (or re-plan each), and compare with the unchanged baseline.

Every row is a steady-state measurement (sim/steady.py): served throughput over the window, and
latency percentiles only where every pool keeps up (a row whose pool saturates says which).

Keys (`--set KEY=V1,V2,...`):
  hardware.<field>        any HardwareSpec number in its YAML unit (B/s, bytes, FLOP/s); nvlink_gbps /
                          scaleout_gbps in GB/s (gigabytes per second per GPU, one way: an 800 Gb/s
                          NIC is 100 GB/s), hbm_tbps in TB/s
  host.async_scheduling, host.cuda_graphs, host.api_servers, host.stream_interval
                          the engine's CPU-overhead settings, on every instance of the plan
  prefill.<field>, decode.<field>, aggregated.<field>
                          any Layout field (dotted) on every instance of that pool, e.g. decode.dbo,
                          decode.eplb.redundant_experts, decode.eplb.policy, prefill.max_tokens_per_step;
                          <pool>.mtp=D: D draft tokens (0: none) as the planner tries them
                          (sim/search/space.py spec_options: its acceptance)
  host.<part>_scale       multiplies one host part's costs (sim/cost/host.py): scheduler_scale,
                          prepare_scale, launch_scale, dp_sync_scale, sample_scale, output_scale,
                          api_server_scale
  cpu.overhead_scale      multiplies every host part (alias of all the host.*_scale at once)
  model.<dotted.field>    e.g. model.moe.top_k, model.hidden_size
  profile.<field>         any Profile number, e.g. profile.mem_eff, profile.host.dp_jitter
  workload.<dotted.field> e.g. workload.prefix_hit_rate
A study changes a Scenario (rackplan/specs/scenario.py), frozen: each change is a dataclasses.replace, so every
__post_init__ check applies.
"""
from __future__ import annotations

import dataclasses
import itertools
import sys
import typing
from dataclasses import dataclass

from rackplan.specs import Plan, Scenario, SpecError
from rackplan.specs.fields import convert
from rackplan.specs.reading import number

from ..expert_load import with_expert_load

ALIASES = {  # friendly key -> (field, factor to the field's unit)
    "hardware.nvlink_gbps": ("hardware.scaleup_bw", 1e9),
    "hardware.scaleout_gbps": ("hardware.scaleout_bw", 1e9),
    "hardware.hbm_tbps": ("hardware.hbm_bw", 1e12),
}
HOST_LAYOUT = ("async_scheduling", "cuda_graphs", "api_servers", "stream_interval")  # Layout fields
POOLS = ("prefill", "decode", "aggregated")  # --set <pool>.<Layout field>: every instance of that pool
HOST_SCALES = {"scheduler_scale": "host.schedule", "prepare_scale": "host.prepare", "launch_scale": "host.launch",
               "dp_sync_scale": "host.dp_sync", "sample_scale": "host.sample", "output_scale": "host.output",
               "api_server_scale": "host.api_server"}
METRICS = ("ttft_p90_s", "tpot_p90_s", "output_tps_per_gpu", "tps_per_user", "request_rate", "served_rps",
           "usd_per_m_output_tokens", "output_tps_per_mw", "joules_per_output_token")  # the last three: economics
LATENCY = ("ttft_p90_s", "tpot_p90_s", "tps_per_user")  # not compared where a pool saturates


def parse_value(text: str):
    """'4' -> 4, '0.5' -> 0.5, '1e9' -> 1e9, 'true' -> True, else the string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text.strip()


def parse_set(text: str) -> tuple[str, list]:
    """'model.moe.top_k=4,6,8' -> ('model.moe.top_k', [4, 6, 8])."""
    key, sep, values = text.partition("=")
    if not sep or not key.strip() or not values.strip() or any(not v.strip() for v in values.split(",")):
        raise SpecError("--set", key.strip() or text, "KEY=V1[,V2...] with no empty value", text)
    return key.strip(), [parse_value(v) for v in values.split(",")]


def _replace_path(obj, path: list[str], value, key: str):
    """Replace the dotted field `path` inside nested frozen dataclasses."""
    names = [f.name for f in dataclasses.fields(obj)]
    if path[0] not in names:
        root = key.split(".", 1)[0] + "."  # at the top level the friendly aliases are keys too
        aliases = [a[len(root):] for a in ALIASES if a.startswith(root)] if key.count(".") == len(path) else []
        raise SpecError("--set", key, "a known field: " + ", ".join(names + aliases))
    if len(path) == 1:
        old = getattr(obj, path[0])
        if type(old) is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        hint = typing.get_type_hints(type(obj))[path[0]]
        return dataclasses.replace(obj, **{path[0]: convert(hint, value, "--set", key)})  # typed like YAML
    inner = getattr(obj, path[0])
    if not dataclasses.is_dataclass(inner):
        raise SpecError("--set", key, f"a nested field of {path[0]}")
    return dataclasses.replace(obj, **{path[0]: _replace_path(inner, path[1:], value, key)})


def apply(specs: Scenario, key: str, value) -> Scenario:
    """The specs with one change; unknown keys and out-of-range values are SpecErrors."""
    if key in ALIASES:
        field, factor = ALIASES[key]
        return apply(specs, field, number(value, "--set", key, lo=0, lo_open=True) * factor)
    if key == "workload.expert_load":  # a source, not a plain field: it also sets routing_skew 0
        return dataclasses.replace(specs, workload=with_expert_load(specs.workload, str(value)))
    root, _, rest = key.partition(".")
    if root == "cpu":
        if rest != "overhead_scale":
            raise SpecError("--set", key, "cpu.overhead_scale")
        return _scale_host(specs, tuple(HOST_SCALES.values()), value, key)
    if root == "host":
        return _apply_host(specs, rest, value, key)
    if root in POOLS and rest:
        return _apply_pool(specs, root, rest, value, key)
    attr = {"hardware": "hw", "model": "model", "profile": "profile", "workload": "workload"}.get(root)
    if attr is None or not rest:
        raise SpecError("--set", key, "a key under hardware., host., cpu., prefill., decode., aggregated., model., "
                        "profile. or workload. (e.g. hardware.nvlink_gbps, host.async_scheduling, "
                        "decode.eplb.redundant_experts, model.moe.top_k)")
    try:
        changed = _replace_path(getattr(specs, attr), rest.split("."), value, key)
    except SpecError as exc:
        if exc.where == "--set":
            raise
        raise SpecError("--set", key, exc.expected, value) from None
    return dataclasses.replace(specs, **{attr: changed})


def _scale_host(specs: Scenario, parts: tuple[str, ...], value, key: str) -> Scenario:
    """Host parts' costs multiplied by `value` (>= 0)."""
    scale = number(value, "--set", key, lo=0)  # a finite factor >= 0 (NaN and inf refused)
    prof = specs.profile.with_host(lambda hp: hp.scaled(parts, scale))
    return dataclasses.replace(specs, profile=prof)


def _apply_host(specs: Scenario, name: str, value, key: str) -> Scenario:
    """host.<part>_scale on the profile, or a host setting on every layout of the plan."""
    if name in HOST_SCALES:
        return _scale_host(specs, (HOST_SCALES[name],), value, key)
    if name not in HOST_LAYOUT:
        raise SpecError("--set", key, "one of host." + ", host.".join(HOST_LAYOUT + tuple(HOST_SCALES)))
    want = bool if name in ("async_scheduling", "cuda_graphs") else int
    if isinstance(value, bool) != (want is bool) or not isinstance(value, want):
        raise SpecError("--set", key, "true or false" if want is bool else "a positive integer", value)
    plan = specs.plan
    if plan is None:
        raise SpecError("--set", key, "a plan to change (host settings apply to its instances)")
    pools = {}
    for pool in POOLS:
        try:
            pools[pool] = tuple(_replace_path(lay, [name], value, key) for lay in getattr(plan, pool))
        except SpecError as exc:
            raise SpecError("--set", key, exc.expected, value) from None
    return dataclasses.replace(specs, plan=dataclasses.replace(plan, **pools))


def _apply_pool(specs: Scenario, pool: str, name: str, value, key: str) -> Scenario:
    """A Layout field (dotted) on every instance of one pool of the plan; `mtp` sets speculation to
    that many draft tokens as the planner's search tries them (0: none)."""
    plan = specs.plan
    if plan is None or not getattr(plan, pool):
        raise SpecError("--set", key, f"a plan with a {pool} pool to change")
    if name == "mtp":
        from .space import SearchSpace, spec_options

        options = {0 if sp is None else sp.num_tokens: sp for sp in spec_options(specs.model, SearchSpace())}
        if isinstance(value, bool) or value not in options:
            raise SpecError("--set", key, f"a draft-token count {specs.model.name}'s drafter runs in the search "
                            f"({', '.join(map(str, sorted(options)))})", value)
        spec = options[value]
        lays = tuple(dataclasses.replace(lay, speculation=spec) for lay in getattr(plan, pool))
    else:
        try:
            lays = tuple(_replace_path(lay, name.split("."), value, key) for lay in getattr(plan, pool))
        except SpecError as exc:
            if exc.where == "--set":
                raise
            raise SpecError("--set", key, exc.expected, value) from None
    from ..deployment import validate_layout

    for i, lay in enumerate(lays):  # EPLB slots that split over EP, fits in HBM
        try:
            validate_layout(lay, specs.model, specs.hw, f"{pool}[{i}]")
        except SpecError as exc:
            raise SpecError("--set", key, exc.expected, value) from None
    # a layout that needs more GPUs (decode.replicas=2, decode.dp=32) grows the plan's budget to them: the
    # what-if is that deployment (per-GPU figures are over the GPUs it uses), not a refusal naming num_gpus
    trial = dataclasses.replace(plan, num_gpus=sys.maxsize, **{pool: lays})
    changed = dataclasses.replace(trial, num_gpus=max(plan.num_gpus, trial.gpus_used))
    return dataclasses.replace(specs, plan=changed)


def combinations(sets: list[tuple[str, list]]) -> list[tuple[tuple[str, object], ...]]:
    """Every combination of the --set values, in the order given; a key set twice is refused (the
    later --set would silently replace the earlier one's values)."""
    keys = [k for k, _ in sets]
    for i, key in enumerate(keys):
        if key in keys[:i]:
            raise SpecError("--set", key, "each key once (its values in one --set KEY=V1,V2)", f"{key} twice")
    return [tuple(zip(keys, vals, strict=False)) for vals in itertools.product(*[v for _, v in sets])]


def changed_specs(base: Scenario, combo) -> Scenario:
    """The specs with every change of `combo`; an EPLB policy first, so that redundant experts set
    beside it never meet the plan's policy 'none' (which refuses them) whatever the --set order."""
    out = base
    for key, value in sorted(combo, key=lambda kv: not kv[0].endswith(".eplb.policy")):
        out = apply(out, key, value)
    return out


def label(combo) -> str:
    return ", ".join(f"{k}={v}" for k, v in combo) or "baseline"


def steady_metrics(res) -> dict:
    """A row's metrics from a SimResult: its steady-state figures, whether it is stable and which
    pool saturates (an empty string when none)."""
    return {**res.metrics, "stable": float(res.stable), "saturated": ",".join(res.stability.saturated)}


def stable(metrics: dict) -> bool:
    return bool(metrics.get("stable", 1.0))


def deltas(metrics: dict, baseline: dict) -> dict[str, float]:
    """Relative change of each metric against the baseline (0.1 = +10%); latency figures only when
    both runs are stable (an unstable run's percentiles only grow with its length)."""
    out = {}
    both = stable(metrics) and stable(baseline)
    for m in METRICS:
        b, v = baseline.get(m), metrics.get(m)
        if b is not None and v is not None and b != 0 and (both or m not in LATENCY):
            out[m] = v / b - 1.0
    return out


# the standard error sim/metrics.py measures beside each compared figure (batch means over the window)
STANDARD_ERROR = {"ttft_p90_s": "ttft_p90_se_s", "tpot_p90_s": "tpot_p90_se_s",
                  "output_tps_per_gpu": "output_tps_per_gpu_se"}
NOISE_Z = 2.0  # a delta within this many standard errors of 0 is run-to-run noise (~95% two-sided)


def delta_errors(metrics: dict, baseline: dict) -> dict[str, float]:
    """Standard error of each delta `deltas` gives, where both runs measured their figure's standard
    error: for d = v / b - 1, (v / b) sqrt((se_v / v)^2 + (se_b / b)^2), the two runs' errors taken as
    independent (they share the seed's arrivals, which correlates them, so this bounds the noise of the
    difference from above). Figures without a standard error (tokens/s/user, rates) get none."""
    out, nan = {}, float("nan")
    for m in deltas(metrics, baseline):
        se = STANDARD_ERROR.get(m, "")
        v, b = metrics[m], baseline[m]
        sv, sb = metrics.get(se, nan), baseline.get(se, nan)
        if v and sv == sv and sb == sb:  # (NaN != NaN: a run too short to measure it)
            out[m] = abs(v / b) * ((sv / v) ** 2 + (sb / b) ** 2) ** 0.5
    return out


def in_noise(delta: float, error: float | None) -> bool:
    """Whether a delta is within NOISE_Z standard errors of no change (False where the error is unknown)."""
    return error is not None and abs(delta) < NOISE_Z * error


@dataclass
class Row:
    combo: tuple
    metrics: dict
    plan: Plan | None = None  # the re-planned plan (--replan)

    @property
    def label(self) -> str:
        return label(self.combo)


SPLIT = ("gpu_ms", "host_exposed_ms", "api_wait_ms")  # where a decode step's time goes


def step_split(specs: Scenario, plan: Plan, batch: int | None = None) -> dict[str, float]:
    """Where one decode step's time goes, in ms: device, exposed host (sim/cost/host.py), waiting for
    the API server (plus all host work, hidden or not, and the API server's own seconds per step);
    the plan's first decode (else aggregated) instance at `batch` sequences per rank
    (default: its cap) and the workload's mean context. Empty for trace-length workloads."""
    from ..cost.step import CostContext, decode_step
    from .estimate import traffic_of

    lay = (plan.decode or plan.aggregated)[0]
    try:
        tr = traffic_of(specs.workload, specs.model)
    except SpecError:
        return {}
    b = batch or lay.max_batch_per_rank
    cost = decode_step(CostContext(specs.model, specs.hw, lay, specs.profile, tr.skew), b, b * tr.ctx_mean)
    gpu = cost.seconds - cost.host.exposed_s
    return {"decode_batch": float(b), "gpu_ms": gpu * 1e3, "host_exposed_ms": cost.host.exposed_s * 1e3,
            "api_wait_ms": cost.api_wait_s * 1e3, "step_ms": cost.period_s * 1e3,
            "host_work_ms": cost.host.total_s * 1e3, "api_server_ms": cost.host.api_s * 1e3}
