"""Predicted TTFT/TPOT of a serving-mode run, for the two readings of the plan.

The executor's serving mode on a 2-core CPU time-shares: prefill rank i and decode rank i are one
process, and each tick runs a prefill step, the KV hand-off and a decode step one after the other
(executor/serve.py). The simulator (sim/simulator.py) models the plan as planned: prefill and
decode instances on their own hardware, running at once. So two predictions are made:
  - `simulator`: the run's own requests (arrival, prompt and output lengths) through
    `sim.simulator.simulate` (what the planner predicts for this plan);
  - `lockstep`: the same requests through the executor's own scheduler (executor/serving.py over
    the serving policy, rackplan/policy: pure Python, no torch), every tick priced by the cost
    model (the step period, StepCost.period_s with its engine-loop time, of the tick's prefill
    chunks and decode seats, `kv_transfer_seconds` of its hand-offs). This is the like-for-like
    check of the profile on a time-shared run (colocated plans only: a plan with separate
    instances runs as the simulator models it, so the simulator's reading is the check).
"""
from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np

from rackplan.sim.cost.step import CostContext, RankBatch, step_cost
from rackplan.sim.cost.transfer import kv_transfer_seconds
from rackplan.specs import Arrival, LengthDist, Plan, Profile, Workload, load_hardware, load_model


def served_requests(records: list[dict]) -> list[dict]:
    """Request records of the first serving run in `records`, in request-id order."""
    reqs = [r for r in records if r["op"] == "request"]
    if not reqs:
        return []
    first = min(r.get("_run", 0) for r in reqs)
    return sorted((r for r in reqs if r.get("_run", 0) == first), key=lambda r: r["step"])


def measured(records: list[dict]) -> dict[str, np.ndarray]:
    """TTFT and TPOT (seconds) of every served request, all serving runs pooled."""
    reqs = [r for r in records if r["op"] == "request"]
    return {"ttft": np.array([r["ttft_s"] for r in reqs]),
            "tpot": np.array([r["tpot_s"] for r in reqs if r["osl"] > 1])}


def trace_workload(reqs: list[dict], name: str, folder: Path) -> Workload:
    """The requests (arrival, prompt and output lengths) as a trace workload for the simulator
    (plain JSONL: timestamp in seconds, input_length, output_length; sim/traces.py)."""
    path = folder / "served_requests.jsonl"
    lines = [json.dumps({"timestamp": round(r["arrival_s"], 6), "input_length": int(r["isl"]),
                         "output_length": int(r["osl"])}) for r in sorted(reqs, key=lambda r: r["arrival_s"])]
    path.write_text("\n".join(lines) + "\n")
    trace = LengthDist(kind="trace")
    return Workload(name=name, arrival=Arrival(kind="trace"), isl=trace, osl=trace, num_requests=len(reqs),
                    trace=str(path))


def simulator(plan: Plan, reqs: list[dict], prof: Profile) -> dict[str, np.ndarray]:
    """TTFT and TPOT of the requests through the discrete-event simulator (plan as planned)."""
    from rackplan.sim.simulator import simulate

    with tempfile.TemporaryDirectory(prefix="rackplan-validate-") as tmp:
        res = simulate(plan, trace_workload(reqs, f"{plan.name}-served", Path(tmp)), prof)
    return {"ttft": res.ttft_s[np.isfinite(res.ttft_s)], "tpot": res.tpot_s[np.isfinite(res.tpot_s)]}


def lockstep(plan: Plan, reqs: list[dict], prof: Profile) -> dict[str, np.ndarray]:
    """TTFT and TPOT of the requests through the executor's time-shared tick loop, cost-model priced."""
    from rackplan.executor.serving import Scheduler, engines

    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    isl, osl = [int(r["isl"]) for r in reqs], [int(r["osl"]) for r in reqs]
    sched = Scheduler(isl, osl, [float(r["arrival_s"]) for r in reqs],
                      *engines(plan, model, hw, isl, osl, [int(r["shape"].get("cached", 0)) for r in reqs]))
    dec = plan.decode[0] if plan.disaggregated else plan.aggregated[0]
    cx_d = CostContext(model, hw, dec, prof)
    if plan.disaggregated:
        pre = plan.prefill[0]
        cx_p = CostContext(model, hw, pre, prof)
        replay(sched, lambda tick: _prefill_s(cx_p, tick), lambda tick: _transfer_s(model, hw, prof, tick, pre.ep_size),
               lambda tick: _decode_s(cx_d, tick))
    else:
        replay(sched, lambda tick: 0.0, lambda tick: 0.0, lambda tick: _decode_s(cx_d, tick))
    ttft = np.array([tl.first_token - tl.arrival for tl in sched.times])
    tpot = np.array([(tl.finish - tl.first_token) / (int(r["osl"]) - 1)
                     for tl, r in zip(sched.times, reqs) if int(r["osl"]) > 1])
    return {"ttft": ttft, "tpot": tpot}


def replay(sched, prefill_s, transfer_s, decode_s) -> None:
    """The executor's tick loop (executor/serve.py) on a clock of priced steps: each tick's prefill
    step, KV hand-off and decode step take `prefill_s(tick)`, `transfer_s(tick)`, `decode_s(tick)`
    seconds (the cost model here; a fixed step clock in the differential test)."""
    now = 0.0
    while True:
        sched.arrive(now)
        if sched.finished:
            break
        if not sched.busy:
            now = sched.next_arrival()
            continue
        tick = sched.plan(now)
        t = now + (prefill_s(tick) if tick.has_prefill else 0.0)
        prefilled = t
        xfer = transfer_s(tick) if tick.transfers else 0.0
        t += xfer
        t += decode_s(tick) if tick.has_decode else 0.0  # (a recompute's or an aggregated prompt's chunks ride with it)
        sched.done(tick, t, prefilled, xfer)
        now = t


def _prefill_s(cx: CostContext, tick) -> float:
    ranks = len(tick.prefill)
    new = [np.array([float(c.take) for c in per]) for per in tick.prefill]
    prefix = [np.array([float(c.start) for c in per]) for per in tick.prefill]
    return step_cost(cx, RankBatch(np.zeros(ranks), np.zeros(ranks), new, prefix)).period_s


def _decode_s(cx: CostContext, tick) -> float:
    batch = np.array([float(len(seats)) for seats in tick.decode])
    ctx = np.array([float(sum(s.ctx + 1 for s in seats)) for seats in tick.decode])
    if not any(tick.decode_chunks):
        return step_cost(cx, RankBatch(batch, ctx)).period_s
    new = [np.array([float(c.take) for c in per]) for per in tick.decode_chunks]  # recomputes of preempted ones
    prefix = [np.array([float(c.start) for c in per]) for per in tick.decode_chunks]
    return step_cost(cx, RankBatch(batch, ctx, new, prefix)).period_s


def _transfer_s(model, hw, prof: Profile, tick, ranks: int) -> float:
    """One all-to-all carries every hand-off of the tick: the busiest sender's KV decides."""
    if not tick.transfers:
        return 0.0
    sent = [0.0] * ranks
    for tr in tick.transfers:
        sent[tr.src % ranks] += tr.length
    return kv_transfer_seconds(model, hw, prof, max(sent), same_domain=True)


def compare(plan: Plan, records: list[dict], prof: Profile) -> dict[str, float]:
    """Predicted vs measured TTFT/TPOT p50/p90 for both readings; keys like
    'lockstep.ttft_p50_err'. The measured side pools every serving run's requests."""
    reqs = served_requests(records)
    if not reqs:
        return {}
    meas = measured(records)
    out: dict[str, float] = {"requests": float(len(reqs)), "serving_runs": float(len({r.get("_run", 0) for r in
                                                                                   records if r["op"] == "request"}))}
    # the time-shared engine (a colocated or aggregated plan)
    readings = [("lockstep", lockstep(plan, reqs, prof))] if plan.colocated or not plan.disaggregated else []
    for name, pred in readings + [("simulator", simulator(plan, reqs, prof))]:
        for metric in ("ttft", "tpot"):
            for q in (50, 90):
                p, m = float(np.percentile(pred[metric], q)), float(np.percentile(meas[metric], q))
                key = f"{name}.{metric}_p{q}"
                out[f"{key}_predicted_s"], out[f"{key}_measured_s"] = p, m
                out[f"{key}_err"] = p / m - 1 if m > 0 and math.isfinite(p) else math.nan
    return out
