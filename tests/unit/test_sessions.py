"""Session workloads: turns drawn with growing context, their KV blocks, the session trace reader,
the session-affine router's pick, and the spec's refusals."""
import json

import numpy as np
import pytest

from rackplan.policy import choose
from rackplan.sim.sessions import with_blocks
from rackplan.sim.workload import make_requests
from rackplan.specs import Arrival, LengthDist, SpecError, Workload, from_dict
from rackplan.specs.session import Sessions

pytestmark = pytest.mark.unit


def fixed(v):
    return LengthDist(kind="fixed", value=v)


def session_wl(**kw):
    base = dict(name="s", arrival=Arrival(kind="poisson", rate=1.0), isl=fixed(100), osl=fixed(10), num_requests=7,
                sessions=Sessions(turns=fixed(3), followup=fixed(20), think_s=2.0))
    return Workload(**{**base, **kw})


def test_each_turn_extends_the_last_turns_context_by_hand():
    """3 turns: 100; 100 + 10 + 20 = 130; 130 + 10 + 20 = 160. Seven turns: sessions of 3, 3, 1 (cut at 7)."""
    r = make_requests(session_wl())
    assert r.isl.tolist() == [100, 130, 160, 100, 130, 160, 100]
    t = r.sessions
    assert t.session.tolist() == [0, 0, 0, 1, 1, 1, 2] and t.turn.tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert t.next_rid.tolist() == [1, 2, -1, 4, 5, -1, -1]
    assert np.isnan(r.arrival_s[[1, 2, 4, 5]]).all() and np.isfinite(r.arrival_s[[0, 3, 6]]).all()
    assert (np.diff(r.arrival_s[[0, 3, 6]]) > 0).all()
    assert (t.think_s > 0).all()  # exponential, mean 2 s
    again = make_requests(session_wl())
    assert np.array_equal(again.sessions.think_s, t.think_s)  # seeded


def test_blocks_share_the_previous_turns_full_blocks_only():
    """Block 16: turn 1 has 6 full blocks + a partial one; turn 2 (130 tokens) starts with the same 6,
    its 7th (now full) is new, and another session shares none."""
    r = with_blocks(make_requests(session_wl()), 16)
    b = r.blocks
    assert len(b[0]) == 7 and len(b[1]) == 9  # ceil(100 / 16), ceil(130 / 16)
    assert b[1][:6] == b[0][:6] and b[1][6] != b[0][6]
    assert b[2][:8] == b[1][:8]
    assert not set(b[3]) & set(b[0])


def test_session_trace_reads_turns_and_delays(tmp_path):
    path = tmp_path / "s.jsonl"
    rows = [{"session_id": "a", "timestamp": 1000, "input_length": 50, "output_length": 5},
            {"session_id": "b", "timestamp": 500, "input_length": 70, "output_length": 7},
            {"session_id": "a", "delay": 3000, "input_length": 10, "output_length": 4}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wl = Workload(name="t", arrival=Arrival(kind="trace"), isl=LengthDist(kind="trace"), osl=LengthDist(kind="trace"),
                  trace=str(path), sessions=Sessions(from_trace=True))
    r = make_requests(wl)
    # sessions by first arrival: b (t = 0), then a (t = 0.5 s) with its two turns: 50, 50 + 5 + 10
    assert r.isl.tolist() == [70, 50, 65] and r.osl.tolist() == [7, 5, 4]
    assert r.arrival_s[0] == 0.0 and r.arrival_s[1] == 0.5 and np.isnan(r.arrival_s[2])
    assert r.sessions.think_s.tolist() == [0.0, 3.0, 0.0]
    path.write_text(json.dumps({"session_id": "a", "timestamp": 0, "input_length": 0, "output_length": 1}) + "\n")
    with pytest.raises(SpecError, match="input_length"):
        make_requests(wl)


def test_session_affine_router_returns_home_else_least_loaded():
    assert choose("session_affine", [5, 0, 3], 1, 1, home=0) == 0  # the session's instance, however loaded
    assert choose("session_affine", [5, 0, 3], 1, 1) == 1  # a first turn: least loaded
    assert choose("least_loaded", [5, 0, 3], 1, 1, home=0) == 1  # the other routers ignore it


@pytest.mark.parametrize("data, field", [
    ({"sessions": {"turns": {"kind": "fixed", "value": 2}}}, "followup"),
    ({"sessions": {"turns": {"kind": "fixed", "value": 2}, "followup": {"kind": "fixed", "value": 5}},
      "prefix_hit_rate": 0.5}, "prefix_hit_rate"),
    ({"sessions": {"turns": {"kind": "fixed", "value": 2}, "followup": {"kind": "fixed", "value": 5}},
      "arrival": {"kind": "concurrency", "concurrency": 4}}, "arrival.kind"),
    ({"sessions": {"from_trace": True, "think_s": 1.0}}, "think_s"),
    ({"sessions": {"from_trace": True}}, "arrival.kind"),
])
def test_bad_session_specs_name_the_field(data, field):
    base = {"name": "w", "arrival": {"kind": "poisson", "rate": 1.0}, "isl": {"kind": "fixed", "value": 10},
            "osl": {"kind": "fixed", "value": 10}}
    with pytest.raises(SpecError) as exc:
        from_dict(Workload, {**base, **data}, "w.yaml")
    assert field in str(exc.value)


def test_next_turn_arrives_its_think_time_after_the_last_one_ends():
    import simpy

    from rackplan.sim.sessions import NextTurns

    env, seen = simpy.Environment(), []
    table = make_requests(session_wl()).sessions
    loop = NextTurns(env, lambda rid: seen.append((rid, env.now)), table)
    env.timeout(5.0).callbacks.append(lambda _ev: loop(0))  # turn 0 ends at 5 s
    env.timeout(6.0).callbacks.append(lambda _ev: loop(2))  # a last turn: nothing follows
    env.run()
    assert seen == [(1, pytest.approx(5.0 + table.think_s[0]))]
