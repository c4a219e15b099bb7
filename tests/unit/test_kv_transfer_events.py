"""KV transfers kept by a busy decode instance (sim/decode.py DecodeInstance.receive) give the run that
a SimPy timeout per transfer gives, event for event, with one event fewer per transfer taken that way.

Each case runs the same seeded requests twice in real SimPy: as the simulator runs them, and with
every transfer a timeout (the delivery before this change); every request timestamp, every decode
step's log and every instance's step ends must be equal bit for bit. A loaded case keeps nearly every
transfer (the decoder is mid-step when prompts finish); a light one sends the decoder idle with
transfers still on their way (they become the events they stand for, in their place in the order);
on a fixed step clock whose prefill and decode periods are in a ratio of small integers, step ends
and transfers land at the same instant, where SimPy's order of events of one time decides.
"""
from __future__ import annotations

from array import array

import numpy as np
import pytest
import simpy

from rackplan.sim import decode
from rackplan.sim.deployment import Deployment
from rackplan.sim.metrics import RequestLog
from rackplan.sim.workload import make_requests
from rackplan.specs import Plan, Scenario, Workload, from_dict, load_hardware, load_model, load_profile

from .test_policy_differential import FixedSteps

pytestmark = pytest.mark.unit

PLAN = {"name": "kv-events", "model": "tiny-moe", "hardware": "cpu-local", "num_gpus": 4,
        "prefill": [{"role": "prefill", "dp": 1, "replicas": 2, "max_tokens_per_step": 64, "max_batch_per_rank": 8,
                     "cuda_graphs": False, "async_scheduling": False}],
        "decode": [{"role": "decode", "dp": 2, "max_batch_per_rank": 6, "max_tokens_per_step": 16,
                    "cuda_graphs": False, "async_scheduling": False}]}


def _workload(rate: float) -> Workload:
    return from_dict(Workload, {"name": "kv", "arrival": {"kind": "poisson", "rate": rate},
                                "isl": {"kind": "lognormal", "mean": 50, "sigma": 0.8},
                                "osl": {"kind": "lognormal", "mean": 14, "sigma": 0.7},
                                "num_requests": 300, "seed": 5})


def _run(wl: Workload, kv_s: float, clock: tuple[float, float] | None, timeouts: bool, monkeypatch) -> tuple:
    """(everything the run logged, events processed, transfers kept) of one run."""
    counts = {"events": 0, "kept": 0}
    receive = decode.DecodeInstance.receive

    def counted(self, rid, seconds):
        if timeouts:  # the delivery before sim/decode.py kept transfers: one timeout each
            self.env.timeout(seconds).callbacks.append(lambda _ev: self.deliver(rid))
            return
        counts["kept"] += self._due is not None
        receive(self, rid, seconds)

    monkeypatch.setattr(decode.DecodeInstance, "receive", counted)
    plan = from_dict(Plan, PLAN)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    reqs = make_requests(wl)
    env = simpy.Environment()
    step = env.step

    def stepped():
        counts["events"] += 1
        step()

    env.step = stepped
    log = RequestLog(len(reqs))
    dep = Deployment(env, Scenario(plan, model, hw, wl, load_profile("cpu-local")), reqs, log)
    dep.kv_s = array("d", [kv_s] * len(reqs))
    if clock is not None:
        for inst in dep.front + dep.decoders:
            inst.pricer = FixedSteps(clock[0] if inst.name.startswith("prefill") else clock[1])
    for rid, t in enumerate(reqs.arrival_s.tolist()):
        env.timeout(t).callbacks.append(lambda _e, rid=rid: dep.submit(rid))
    env.run()
    assert np.isfinite(log.finish).all()
    logged = [a.tobytes() for a in (log.arrival, log.first_token, log.finish, log.prefill_done)]
    logged += [bytes(a) for a in (log.step_durations, log.step_seqs, log.step_end, log.step_tokens)]
    logged += [bytes(inst.step_ends) for inst in dep.front + dep.decoders]
    return logged, counts["events"], counts["kept"]


@pytest.mark.parametrize("rate,kv_s,clock", [(40.0, 0.013, None), (1.0, 0.5, None),
                                             (9.0, 0.0, (0.5, 0.25)), (1.0, 1.0, (0.5, 0.25))])
def test_kept_transfers_give_the_timeouts_run(rate, kv_s, clock, monkeypatch):
    wl = _workload(rate)
    ours, events, kept = _run(wl, kv_s, clock, False, monkeypatch)
    theirs, events_before, _ = _run(wl, kv_s, clock, True, monkeypatch)
    assert ours == theirs
    assert kept > 0
    # every kept transfer is one event fewer, less those the decoder's idling turned back into events
    assert events_before - kept <= events < events_before
