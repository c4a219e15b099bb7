"""The simulator's one arrivals generator (sim/simulator.OpenLoop): each request submitted at its
arrival time in real SimPy, NaN arrivals left to the sessions' loop, and a growing stream drawn from
once every drawn arrival is submitted (a continued run). Exact seeded timelines."""
from array import array

import numpy as np
import pytest
import simpy

from rackplan.sim.simulator import OpenLoop

pytestmark = pytest.mark.unit


def test_each_request_is_submitted_at_its_arrival_and_nan_ones_are_left_out():
    env, seen = simpy.Environment(), []
    OpenLoop(env, lambda rid: seen.append((rid, env.now)), np.array([0.0, 0.5, np.nan, 0.5, 2.0]), first_rid=10)
    assert seen == [(10, 0.0)]  # an arrival at t = 0 is submitted at once
    env.run()
    assert seen == [(10, 0.0), (11, 0.5), (13, 0.5), (14, 2.0)]


def test_a_growing_stream_is_drawn_from_once_every_drawn_arrival_is_submitted():
    env, seen, draws = simpy.Environment(), [], []
    times = array("d", [1.0])
    chunks = [[3.0, 4.0]]

    def more() -> bool:
        draws.append((env.now, len(seen)))
        if not chunks:
            return False
        times.extend(chunks.pop())
        return True

    OpenLoop(env, lambda rid: seen.append((rid, env.now)), times, first_rid=2, more=more, chunk=1)
    env.run(until=3.5)
    assert seen == [(2, 1.0), (3, 3.0)] and draws == [(1.0, 1)]  # drawn right after the last drawn arrival
    env.run()
    assert seen == [(2, 1.0), (3, 3.0), (4, 4.0)] and draws == [(1.0, 1), (4.0, 3)]


def test_closed_arrivals_submit_nothing_more():
    env, seen = simpy.Environment(), []
    loop = OpenLoop(env, seen.append, np.array([1.0, 2.0, 3.0]))
    env.run(until=1.5)
    loop.close()
    env.run()
    assert seen == [0]
