"""The closed loop's front end: the API-server processes tokenise each new request's prompt, one request at
a time per process, before the engine sees it (sim/cost/host.py prompt_seconds, sim/simulator.py FrontEnd)."""
from types import SimpleNamespace

import numpy as np
import pytest
import simpy

from rackplan.sim.cost import host
from rackplan.sim.simulator import FrontEnd
from rackplan.specs import HostParams, Layout

pytestmark = pytest.mark.unit


class _Log:
    def __init__(self):
        self.arrival = {}

    def arrive(self, rid, t):
        self.arrival[rid] = t


def _front(servers: int, per_token_s: float, isl: list[int]):
    """A real SimPy environment and FrontEnd; the deployment side records when each request is logged
    (sent) and when it reaches the engine (entered)."""
    env = simpy.Environment()
    entered = {}
    dep = SimpleNamespace(log=_Log(), front_end_servers=servers,
                          front_end_host=HostParams(api_per_prompt_token_s=per_token_s),
                          enter=lambda rid: entered.__setitem__(rid, env.now))
    return env, dep, entered, FrontEnd(env, dep, np.asarray(isl))


def test_replacements_reach_the_engine_one_tokenisation_apart():
    # 2 processes, 1,000-token prompts at 1 us a token: 1 ms each. Five requests sent at t = 0 enter at
    # 1, 1 (both processes), 2, 2, 3 ms; a sixth sent at 10 ms finds a process free and enters at 11 ms.
    env, dep, entered, front = _front(2, 1e-6, [1000] * 6)
    for rid in range(5):
        front.send(rid)
    env.run(until=0.010)
    front.send(5)
    env.run()
    assert [round(entered[r] * 1e3, 9) for r in range(6)] == [1.0, 1.0, 2.0, 2.0, 3.0, 11.0]
    assert [dep.log.arrival[r] for r in range(5)] == [0.0] * 5 and dep.log.arrival[5] == pytest.approx(0.010)


def test_prompt_seconds_scale_with_the_prompt():
    # 2,048 tokens at vLLM PR 45759's 0.78 us a token: 1.597 ms
    assert host.prompt_seconds(HostParams(), 2048) == pytest.approx(2048 * 0.78e-6)
    env, dep, entered, front = _front(1, 1e-6, [500, 2000])
    front.send(0)
    front.send(1)
    env.run()
    assert entered == {0: pytest.approx(0.0005), 1: pytest.approx(0.0025)}


def test_no_front_end_cost_enters_at_once():
    env, dep, entered, front = _front(1, 0.0, [2048, 2048])
    front.send(0)
    front.send(1)
    assert entered == {0: 0.0, 1: 0.0}


@pytest.mark.parametrize("lay, servers", [
    (dict(dp=1, tp=2), 1),  # TP2: one endpoint, one process
    (dict(dp=2, tp=1), 2),  # DP2 on a 4-GPU host: one endpoint, a process per DP rank
    (dict(dp=8, tp=1), 8),  # DP8 over two 4-GPU hosts: two endpoints of four processes
    (dict(dp=8, tp=1, api_servers=1), 2),  # one process per endpoint
])
def test_front_end_servers(lay, servers):
    assert host.front_end_servers(Layout(role="both", **lay), 4) == servers
