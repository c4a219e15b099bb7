"""Calibration from a `vllm bench serve --save-result --save-detailed` run of a plan's deployment.

End-to-end measurements identify few things; this fits those and reuses the op-level profile for
the rest:
  prefill_scale   one factor on every device op of prompt steps (Profile.op_scale "op/prefill")
  decode_scale    one factor on every device op of decode steps (op_scale "op/decode")
  host_scale      one factor on every host part of a step (the profile's `host:` block: shows where
                  async scheduling does not hide it, sim/cost/host.py)
  kv_transfer_alpha_s   the KV connector's fixed cost per request (TTFT that no batch explains)
The bench's own requests (send times, prompt and output lengths) are replayed through the simulator
(the plan as planned) and the parameters move until the replay's TTFT/TPOT statistics match the
measured ones: Gauss-Newton on log-parameters with finite differences, a weak prior pulling each
parameter to its base value, so what the data cannot see stays where the base profile put it and
is reported as not identified. Statistics: TTFT p50/p90 (overall and per prompt-length third when
lengths vary) and TPOT p50/p90, as log ratios.

Schema read (vLLM 0.33 vllm/benchmarks/serve.py): model_id, request_rate, max_concurrency and, from
--save-detailed, the per-request arrays input_lens, output_lens, ttfts, latencies, start_times,
errors (seconds). `simulated_bench` writes the same schema from a simulation (tests, benchmarks).
"""
from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rackplan.sim.traces import MAX_TOKENS
from rackplan.specs import Arrival, Plan, Profile, SpecError, load_workload, plan_hash
from rackplan.specs.ops import DEVICE_OPS
from rackplan.specs.profile import HOST_FIELDS

from . import io

PARAMS = ("prefill_scale", "decode_scale", "host_scale", "kv_transfer_alpha_s")
DETAILED = ("input_lens", "output_lens", "ttfts", "latencies", "start_times")
STAT_SD = 0.02  # assumed spread of a measured statistic (log units): 2%
PRIOR_SD = math.log(3.0)  # a parameter rarely sits more than 3x from its base value
FD_STEP = 0.05  # finite-difference step (log units)
MAX_ITER = 8
LM_DAMPING = (0.0, 1.0, 10.0)  # Gauss-Newton first, then damped towards the gradient (_step)


@dataclass(frozen=True)
class Bench:
    """One bench run's successful requests, in send order; seconds from its first request."""

    source: str
    summary: dict  # io.read_vllm_bench: throughput, percentiles, load, sha256
    start_s: np.ndarray  # [N]
    isl: np.ndarray  # [N] prompt tokens
    osl: np.ndarray  # [N] output tokens
    ttft_s: np.ndarray  # [N]
    latency_s: np.ndarray  # [N]
    concurrency: int | None  # closed loop (request rate inf) with this many in flight

    @property
    def tpot_s(self) -> np.ndarray:  # [N] NaN for one-token outputs
        return np.where(self.osl > 1, (self.latency_s - self.ttft_s) / np.maximum(self.osl - 1, 1), np.nan)


def _served_name(plan: Plan) -> str:
    from rackplan.deploy import FAMILIES

    fam = FAMILIES.get(plan.model)
    return fam.hf_id if fam else plan.model


def _check_model(path, data: dict, plan: Plan) -> None:
    want = _served_name(plan)
    got = str(data.get("model_id", ""))
    if got.rstrip("/").split("/")[-1].lower() not in (want.split("/")[-1].lower(), plan.model.lower()):
        raise SpecError(str(path), "model_id", f"a run of {want} (plan {plan.name})", got)
    ran = data.get("rackplan_plan_hash")  # bench.sh records it with --metadata
    if ran is not None and ran != plan_hash(plan):
        raise SpecError(str(path), "rackplan_plan_hash", f"{plan_hash(plan)} (plan {plan.name})", ran)


def _arrays(path, data: dict) -> dict[str, np.ndarray]:
    out = {}
    for key in DETAILED:
        v = data.get(key)
        if not isinstance(v, list) or not v:
            raise SpecError(str(path), key, "a per-request list (run vllm bench serve with --save-result "
                            "--save-detailed)", "missing" if v is None else type(v).__name__)
        bad = next((x for x in v if isinstance(x, bool) or not isinstance(x, (int, float))), None)
        if bad is not None:
            raise SpecError(str(path), key, "a list of numbers", bad)
        out[key] = np.asarray(v, float)
        if key in ("input_lens", "output_lens"):
            bad = ~((out[key] >= 0) & (out[key] <= MAX_TOKENS) & (out[key] == np.round(out[key])))
            if bad.any():
                i = int(np.argmax(bad))
                raise SpecError(str(path), f"{key}[{i}]", f"a whole token count in [0, {MAX_TOKENS:.0e}]", v[i])
        elif not np.isfinite(out[key]).all():
            i = int(np.argmax(~np.isfinite(out[key])))
            raise SpecError(str(path), f"{key}[{i}]", "a finite number of seconds", v[i])
    n = {len(a) for a in out.values()}
    if len(n) > 1:
        raise SpecError(str(path), "input_lens", "per-request lists of one length", sorted(n))
    return out


def _check_served(path, a: dict[str, np.ndarray], ok: np.ndarray) -> None:
    """Every successful request's times are in range: 0 < TTFT <= latency (vLLM measures both from the
    request's send time); a request outside them is a SpecError naming the file and its index, never
    dropped (dropping it would move the fit)."""
    for key, bad, want in (("ttfts", ok & ~(a["ttfts"] > 0), "a TTFT > 0 s for a successful request"),
                           ("latencies", ok & ~(a["latencies"] >= a["ttfts"]),
                            "a latency >= the request's TTFT (both from its send time)")):
        if bad.any():
            i = int(np.argmax(bad))
            raise SpecError(str(path), f"{key}[{i}]", want, float(a[key][i]))


def _finite_rate(rate) -> bool:
    """vLLM records an unthrottled run's request_rate as "inf"."""
    return isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate)


def read_summary(path: str | Path, plan: Plan) -> dict:
    """io.read_vllm_bench's summary of a bench result JSON of `plan` (SpecError on another model's or
    another plan's run); its "detailed" says whether per-request data is there for read_bench."""
    summary = io.read_vllm_bench(path)
    _check_model(path, io.bench_json(path), plan)
    return summary


def read_bench(path: str | Path, plan: Plan) -> Bench:
    """The successful requests of a bench result JSON of `plan`; SpecError on another model, another
    plan's run, missing detailed fields or no successful request."""
    summary = io.read_vllm_bench(path)
    data = io.bench_json(path)
    _check_model(path, data, plan)
    a = _arrays(path, data)
    n = len(a["ttfts"])
    errors = data.get("errors") or [""] * n
    if not isinstance(errors, list) or len(errors) != n:
        raise SpecError(str(path), "errors", f"a list of {n} error strings, one per request")
    ok = np.array([not e for e in errors]) & (a["output_lens"] > 0)  # a request without a token has no TTFT
    _check_served(path, a, ok)
    if not ok.any():
        raise SpecError(str(path), "errors", "at least one successful request")
    order = np.argsort(a["start_times"][ok], kind="stable")
    pick = lambda k: a[k][ok][order]  # noqa: E731
    closed = bool(data.get("max_concurrency")) and not _finite_rate(data.get("request_rate"))
    return Bench(str(path), summary, pick("start_times") - pick("start_times")[0], pick("input_lens"),
                 pick("output_lens"), pick("ttfts"), pick("latencies"),
                 int(data["max_concurrency"]) if closed else None)


def replay(plan: Plan, bench: Bench, prof: Profile) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) per bench request through the simulator, same order as the bench's arrays."""
    from rackplan.sim.simulator import simulate

    from .serve_replay import trace_workload

    base = load_workload(plan.workload) if plan.workload else None
    reqs = [{"arrival_s": float(t), "isl": int(i), "osl": int(o)}
            for t, i, o in zip(bench.start_s, bench.isl, bench.osl)]
    with tempfile.TemporaryDirectory(prefix="rackplan-bench-") as tmp:
        wl = trace_workload(reqs, f"{plan.name}-vllm-bench", Path(tmp))
        if base is not None:  # the prefix hits and routing skew the run was planned with
            wl = dataclasses.replace(wl, prefix_hit_rate=base.prefix_hit_rate, routing_skew=base.routing_skew)
        if bench.concurrency:
            wl = dataclasses.replace(wl, arrival=Arrival(kind="concurrency", concurrency=bench.concurrency))
        try:
            res = simulate(plan, wl, prof, num_requests=len(reqs))
        except SpecError as exc:  # about the bench's requests (e.g. a prompt beyond the KV capacity): its file
            got = str(exc).partition(f"expected {exc.expected}")[2]
            field = {"isl + osl": "input_lens + output_lens", "isl": "input_lens", "osl": "output_lens"}
            raise SpecError(bench.source, field.get(exc.field, exc.field), f"{exc.expected}{got}") from None
    return res.ttft_s, res.tpot_s


def statistics(bench: Bench, ttft: np.ndarray, tpot: np.ndarray) -> dict[str, float]:
    """TTFT p50/p90 overall and per prompt-length third (when lengths vary), TPOT p50/p90."""
    out = {f"ttft_p{q}": float(np.nanpercentile(ttft, q)) for q in (50, 90)}
    out.update({f"tpot_p{q}": float(np.nanpercentile(tpot, q)) for q in (50, 90)})
    lo, hi = np.percentile(bench.isl, [100 / 3, 200 / 3])
    if hi > lo:
        for name, sel in (("short", bench.isl <= lo), ("long", bench.isl > hi)):
            out[f"ttft_p50_{name}"] = float(np.nanmedian(ttft[sel]))
    return out


def with_params(base: Profile, x: dict[str, float]) -> Profile:
    """`base` with fitted values: per-phase scales folded into op_scale, host and KV costs set."""
    scale = dict(base.op_scale)
    for phase in ("prefill", "decode"):
        s = x.get(f"{phase}_scale", 1.0)
        for op in DEVICE_OPS:
            scale[f"{op}/{phase}"] = base.op_scale.get(f"{op}/{phase}", base.op_scale.get(op, 1.0)) * s
    prof = base.with_host(lambda hp: hp.scaled(tuple(HOST_FIELDS), x.get("host_scale", 1.0)))
    return dataclasses.replace(prof, op_scale=scale,
                               kv_transfer_alpha_s=x.get("kv_transfer_alpha_s", base.kv_transfer_alpha_s))


def _refs(base: Profile) -> dict[str, float]:
    """Base value of each parameter (the prior's centre); a zero base cost starts from 100 us."""
    return {"prefill_scale": 1.0, "decode_scale": 1.0, "host_scale": 1.0,
            "kv_transfer_alpha_s": base.kv_transfer_alpha_s or 1e-4}


class _Objective:
    """Log ratios of replayed to measured statistics as a function of the log-parameters z [P]."""

    def __init__(self, plan: Plan, benches: list[Bench], base: Profile):
        self.plan, self.benches, self.base, self.refs = plan, benches, base, _refs(base)
        self.keys: list[list[str]] = []  # per bench: the statistics it measures (finite, positive)
        meas = []
        for b in benches:
            st = statistics(b, b.ttft_s, b.tpot_s)
            self.keys.append([k for k, v in st.items() if math.isfinite(v) and v > 0])
            meas += [st[k] for k in self.keys[-1]]
        self.names = [k if len(benches) == 1 else f"{i}.{k}" for i, ks in enumerate(self.keys) for k in ks]
        self.log_measured = np.log(meas)
        self.sims = 0

    def values(self, z: np.ndarray) -> dict[str, float]:
        return {k: self.refs[k] * math.exp(float(zk)) for k, zk in zip(PARAMS, z)}

    def predicted(self, z: np.ndarray) -> np.ndarray:
        prof = with_params(self.base, self.values(z))
        out = []
        for b, keys in zip(self.benches, self.keys):
            self.sims += 1
            st = statistics(b, *replay(self.plan, b, prof))
            out += [st[k] for k in keys]
        return np.asarray(out, float)

    def __call__(self, z: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(self.predicted(z), 1e-12)) - self.log_measured

    def jacobian(self, z: np.ndarray, r: np.ndarray) -> np.ndarray:  # [S, P]
        return np.stack([(self(z + FD_STEP * e) - r) / FD_STEP for e in np.eye(len(z))], axis=1)


@dataclass
class Fit:
    """A fitted profile with what the data could identify and the error before and after."""

    profile: Profile
    values: dict[str, float]
    identified: dict[str, bool]
    sd: dict[str, float]  # posterior standard deviation, log units (relative)
    before: dict[str, float]  # statistic -> replay / measured - 1 with the base profile
    after: dict[str, float]
    sims: int


def _cost(r: np.ndarray, z: np.ndarray) -> float:
    return float(r @ r) / STAT_SD ** 2 + float(z @ z) / PRIOR_SD ** 2


def _step(obj: _Objective, z: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One damped Gauss-Newton step with the prior; returns (z, r, normal matrix). Where no halving of the
    Gauss-Newton step lowers the cost (parameters the statistics barely tell apart, e.g. host time and the
    prefill scale both in TTFT, whose finite-difference columns the simulation's noise can turn), the step is
    damped towards the gradient (Levenberg-Marquardt: A + lam diag(A)), which lowers it for a large enough lam."""
    J = obj.jacobian(z, r)
    A = J.T @ J / STAT_SD ** 2 + np.eye(len(z)) / PRIOR_SD ** 2
    g = J.T @ r / STAT_SD ** 2 + z / PRIOR_SD ** 2
    for lam in LM_DAMPING:
        dz = np.clip(-np.linalg.solve(A + lam * np.diag(np.diag(A)), g), -0.7, 0.7)
        for _ in range(4):  # halve until the cost falls
            zn = z + dz
            rn = obj(zn)
            if _cost(rn, zn) < _cost(r, z):
                return zn, rn, A
            dz = dz / 2
    return z, r, A


def _descend(obj: _Objective, z: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Damped Gauss-Newton steps from z until they stop moving: (z, residuals, normal matrix)."""
    A = None
    for _ in range(MAX_ITER):
        zn, rn, A = _step(obj, z, r)
        moved = float(np.max(np.abs(zn - z)))
        z, r = zn, rn
        if moved < 2e-3:
            break
    return z, r, A


def fit(plan: Plan, benches: list[Bench], base: Profile, name: str) -> Fit:
    """Fit PARAMS to the benches (jointly), starting from and falling back to `base`."""
    obj = _Objective(plan, benches, base)
    z0 = np.zeros(len(PARAMS))
    r0 = obj(z0)
    z, r, A = _descend(obj, z0, r0)
    sd = np.sqrt(np.diag(np.linalg.inv(A)))
    # The replay is piecewise in the parameters (whole steps, whole blocks), so a descent can stop where
    # one parameter compensates the others (host time standing in for part of both phase scales). Restart
    # from the fit with each parameter that moved beyond two sd put back at its base value; keep the
    # start whose end costs least.
    for i in np.flatnonzero(np.abs(z) > 2 * sd):
        zs = z.copy()
        zs[i] = 0.0
        zb, rb, Ab = _descend(obj, zs, obj(zs))
        if _cost(rb, zb) < _cost(r, z):
            z, r, A = zb, rb, Ab
    sd = np.sqrt(np.diag(np.linalg.inv(A)))
    identified = sd < PRIOR_SD / 3
    if not identified.all():  # what the data cannot see keeps its base value
        z = np.where(identified, z, 0.0)
        r = obj(z)
    values = {k: float(f"{v:.4g}") for k, v in obj.values(z).items()}
    prof = dataclasses.replace(with_params(base, values), name=name)
    return Fit(prof, values, dict(zip(PARAMS, identified.tolist())), {k: float(s) for k, s in zip(PARAMS, sd)},
               dict(zip(obj.names, np.expm1(r0).tolist())), dict(zip(obj.names, np.expm1(r).tolist())), obj.sims)


def _metric_fields(name: str, values_s: np.ndarray) -> dict[str, float]:
    """vLLM's summary keys of one metric in ms (mean/median/std and --metric-percentiles 50,90,99)."""
    v = np.asarray(values_s, float) * 1e3
    out = {f"mean_{name}_ms": float(np.mean(v)), f"median_{name}_ms": float(np.median(v)),
           f"std_{name}_ms": float(np.std(v))}
    out.update({f"p{q}_{name}_ms": float(np.percentile(v, q)) for q in (50, 90, 99)})
    return out


def _max_in_flight(starts: np.ndarray, ends: np.ndarray) -> int:
    """Most requests in flight at once (ends sort before starts at equal times)."""
    t = np.concatenate([starts, ends])
    step = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.lexsort((step, t))
    return int(np.max(np.cumsum(step[order])))


def simulated_bench(plan: Plan, prof: Profile, workload, num_requests: int | None = None,
                    seed: int | None = None) -> dict:
    """The JSON `vllm bench serve --save-result --save-detailed` would write for a simulation of `plan`
    serving an open-loop `workload` under `prof`. ITLs are each request's mean TPOT repeated (the
    simulator keeps no per-token timeline)."""
    from rackplan.sim.simulator import simulate
    from rackplan.sim.workload import make_requests

    if workload.arrival.kind == "concurrency":
        raise SpecError(workload.name, "arrival", "an open-loop (poisson or trace) workload")
    reqs = make_requests(workload, num_requests, seed)
    res = simulate(plan, workload, prof, len(reqs), seed)
    ttft, lat, osl = res.ttft_s, res.e2e_s, reqs.osl
    tpot = np.where(osl > 1, (lat - ttft) / np.maximum(osl - 1, 1), 0.0)
    dur = float(np.max(reqs.arrival_s + lat) - np.min(reqs.arrival_s))
    rate = workload.arrival.rate if workload.arrival.kind == "poisson" else "inf"
    out = {"date": "20261201-000000", "endpoint_type": "openai", "backend": "openai", "label": None,
           "model_id": _served_name(plan), "tokenizer_id": _served_name(plan), "num_prompts": len(reqs),
           "rackplan_plan": plan.name, "rackplan_plan_hash": plan_hash(plan), "rackplan_workload": workload.name,
           "request_rate": rate,
           "burstiness": 1.0, "max_concurrency": None, "duration": dur, "completed": len(reqs), "failed": 0,
           "total_input_tokens": int(reqs.isl.sum()), "total_output_tokens": int(osl.sum()),
           "request_throughput": len(reqs) / dur, "request_goodput": None,
           "output_throughput": float(osl.sum()) / dur, "total_token_throughput": float((reqs.isl + osl).sum()) / dur,
           "input_lens": reqs.isl.tolist(), "output_lens": osl.tolist(), "ttfts": ttft.tolist(),
           "itls": [[float(t)] * int(n - 1) for t, n in zip(tpot, osl)], "latencies": lat.tolist(),
           "start_times": (1000.0 + reqs.arrival_s).tolist(), "queue_times": [0.0] * len(reqs),
           "generated_texts": [""] * len(reqs), "errors": [""] * len(reqs),
           "max_output_tokens_per_s": float(osl.sum()) / dur,
           "max_concurrent_requests": _max_in_flight(reqs.arrival_s, reqs.arrival_s + lat), "rtfx": 0.0}
    for name, vals in (("ttft", ttft), ("tpot", tpot[osl > 1]), ("itl", np.repeat(tpot, np.maximum(osl - 1, 0))),
                       ("e2el", lat)):
        out.update(_metric_fields(name, vals))
    return out
