"""SLO classes (rackplan/specs/slo.py, sim/request_classes.py): targets, class assignment, per-class
attainment derived by hand, priority in the engines' queues, and the goodput objective's choice."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rackplan.policy import EngineCore
from rackplan.sim import request_classes as rc
from rackplan.sim.search import planner
from rackplan.sim.search.front import Verified
from rackplan.sim.search.verify import Check, slo_misses
from rackplan.sim.workload import make_requests
from rackplan.specs import SLO, SpecError, Workload, from_dict, load_workload

pytestmark = pytest.mark.unit
BASE = {"name": "two", "arrival": {"kind": "poisson", "rate": 1.0}, "isl": {"kind": "fixed", "value": 100},
        "osl": {"kind": "fixed", "value": 11}}
CLASSES = [{"name": "interactive", "share": 0.7, "slo": {"ttft_p99_s": 1.0, "tpot_p99_s": 0.03}},
           {"name": "batch", "share": 0.3, "osl": {"kind": "fixed", "value": 50}, "slo": {"e2e_p90_s": 60},
            "priority": 1}]


def two_class(**extra) -> Workload:
    return from_dict(Workload, dict(BASE, classes=CLASSES, **extra))


@pytest.mark.parametrize("classes,field", [
    ([{"name": "a", "share": 1.0, "slo": {"ttft_p95_s": 1}}], "classes[0].slo.ttft_p95_s"),
    ([{"name": "a", "share": 1.0, "slo": {"ttft_p99_s": -1}}], "classes[0].slo.ttft_p99_s"),
    ([{"name": "a", "share": 0.5}, {"name": "b", "share": 0.4}], "classes"),
    ([{"name": "a", "share": 0.5}, {"name": "a", "share": 0.5}], "classes")])
def test_bad_classes_name_the_field(classes, field):
    with pytest.raises(SpecError) as exc:
        from_dict(Workload, dict(BASE, classes=classes))
    assert exc.value.field == field


def test_classes_follow_shares_and_lengths_and_old_workloads_draw_as_before():
    wl = two_class(num_requests=4000)
    k = rc.class_index(wl, 0, 4000)
    assert abs((k == 0).mean() - 0.7) < 0.03  # 4000 draws: 3 sigma is 0.022
    assert (rc.class_index(wl, 1000, 500) == k[1000:1500]).all()  # by index, however drawn
    reqs = make_requests(wl)
    assert (reqs.osl[k == 0] == 11).all() and (reqs.osl[k == 1] == 50).all()
    assert (reqs.priority == k).all()  # interactive 0, batch 1
    plain = dataclasses.replace(wl, classes=())
    again = make_requests(plain)
    assert again.priority is None and (again.arrival_s == reqs.arrival_s).all()  # classes draw after


def test_per_class_attainment_by_hand():
    """Four interactive requests (one misses TTFT, one misses TPOT) and two batch ones (one over 60 s)."""
    wl = two_class()
    k = rc.class_index(wl, 0, 64)
    inter, batch = np.flatnonzero(k == 0)[:4], np.flatnonzero(k == 1)[:2]
    idx = np.concatenate([inter, batch])
    n = idx.max() + 1
    osl, ttft, tpot, e2e = np.full(n, 11), np.full(n, 0.1), np.full(n, 0.01), np.full(n, 1.0)
    ttft[inter[1]], tpot[inter[2]], e2e[batch[1]] = 2.0, 0.05, 90.0
    inw = np.zeros(n, dtype=bool)
    inw[idx] = True
    m = rc.class_metrics(wl, osl, ttft, tpot, e2e, inw, 2.0, {})
    assert m["class.interactive.attainment"] == 0.5 and m["class.batch.attainment"] == 0.5
    assert m["goodput_rps"] == 3 / 2.0 and m["slo_attainment"] == 0.5
    assert m["class.interactive.ttft_p99_s"] == pytest.approx(np.percentile([0.1, 2.0, 0.1, 0.1], 99))
    assert m["class.batch.e2e_p90_s_limit"] == 60.0
    misses = slo_misses(dict(m, ttft_p90_s=0.1, tpot_p90_s=0.01), SLO(2.0, 0.05))
    assert set(misses) == {"class.interactive.ttft_p99_s", "class.interactive.tpot_p99_s", "class.batch.e2e_p90_s"}
    assert rc.search_slo(SLO(2.0, 0.05), wl) == SLO(1.0, 0.03)


def test_priority_queues_ahead_of_higher_values():
    """vLLM's priority policy: a waiting request goes ahead of every waiting one with a higher value."""
    core = EngineCore("prefill", 1, 10, 4, 1000, 16, [10] * 5, [5] * 5, [0] * 5, priority=[1, 0, 1, 0, 2])
    for rid in range(5):
        core.bind(rid, 0)
        core.add(rid)
    assert list(core.waiting[0]) == [1, 3, 0, 2, 4]
    fifo = EngineCore("prefill", 1, 10, 4, 1000, 16, [10] * 5, [5] * 5, [0] * 5)
    for rid in range(5):
        fifo.bind(rid, 0)
        fifo.add(rid)
    assert list(fifo.waiting[0]) == [0, 1, 2, 3, 4]


class _Cand:
    def __init__(self, name, gpus, tps_gpu):
        self.summary, self.gpus, self.tps_gpu, self.tps_user, self.rate_rps = name, gpus, tps_gpu, 50.0, 10.0


def test_goodput_objective_picks_goodput_per_gpu_where_throughput_picks_tokens():
    """By hand: A serves 20 good req/s on 8 GPUs (2.5 per GPU) at 900 tok/s/GPU; B 12 on 4 (3.0 per
    GPU) at 800: throughput picks A, goodput B."""
    def ver(name, gpus, tps, good):
        m = {"output_tps_per_gpu": tps, "tps_per_user": 50.0, "goodput_rps": good}
        return Verified(_Cand(name, gpus, tps), Check(10.0, m, True))
    vs = [ver("A", 8, 900.0, 20.0), ver("B", 4, 800.0, 12.0)]
    req = type("Req", (), {"objective": "throughput"})()
    assert planner.choose(req, vs).cand.summary == "A"
    req.objective = "goodput"
    assert planner.choose(req, vs).cand.summary == "B"


def test_embedded_two_class_workload():
    wl = load_workload("chat-batch")
    assert [c.name for c in wl.classes] == ["interactive", "batch"] and wl.expert_load == "published"
    assert {t.key: t.limit_s for t in wl.classes[0].targets} == {"ttft_p99_s": 1.0, "tpot_p99_s": 0.03}
