"""The host sweep's prefill part (benchmarks/host_sweep.py): a seeded trace of bursts (one arrival
instant each, every burst size) that the trace reader takes as it is, with prompts short and long
enough that the token budget chunks some."""
import json
from pathlib import Path

import numpy as np
import pytest
from bench_scripts import script

from rackplan.sim.workload import make_requests
from rackplan.specs import load_workload

ROOT = Path(__file__).resolve().parents[2]
hs = script("host_sweep.py")

pytestmark = pytest.mark.unit


def test_burst_trace_is_bursts_with_chunked_prompts(tmp_path):
    b = hs.BURST
    rows = hs.burst_trace(0)
    assert rows == hs.burst_trace(0) and rows != hs.burst_trace(1)  # seeded
    t = np.array([r["timestamp"] for r in rows])
    isl = np.array([r["input_length"] for r in rows])
    assert np.all(np.diff(t) >= 0)
    _, sizes = np.unique(t, return_counts=True)  # one arrival instant per burst
    assert len(sizes) == b["bursts"] and sizes.min() >= b["burst_sizes"][0] and sizes.max() <= b["burst_sizes"][1]
    assert len(set(sizes)) == b["burst_sizes"][1] - b["burst_sizes"][0] + 1  # every size, held-out ones too
    assert ((isl >= b["short"][0]) & (isl <= b["long"][1])).all()
    assert (isl > b["budget"]).sum() > 0 and (isl <= b["short"][1]).mean() > 0.9  # some span steps
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wl = tmp_path / "wl.yaml"
    wl.write_text(json.dumps(hs.burst_workload(trace, len(rows))))
    reqs = make_requests(load_workload(wl))
    assert len(reqs.isl) == len(rows) and list(reqs.isl) == list(isl)
    assert np.allclose(reqs.arrival_s, t) and set(reqs.osl) == {b["osl"]}


class _Store:
    """The one store call Control.release makes: the next unclaimed request."""

    def __init__(self):
        self.next = 0

    def add(self, key, n):
        assert key == "next"
        self.next += n
        return self.next


def test_paced_release_takes_one_arrival_instant_after_the_last_is_claimed():
    from rackplan.executor.control import Control

    store = _Store()
    ctl = Control(store, np.array([0.0, 0.0, 0.0, 0.1, 0.2, 0.2]), 0, paced=True)
    assert np.isnan(ctl.arrival(0))
    assert ctl.release(1.5) == 3 and [ctl.arrival(r) for r in range(3)] == [1.5] * 3 and np.isnan(ctl.arrival(3))
    assert ctl.release(1.6) == 0  # the first burst is not claimed yet
    store.next = 3
    assert ctl.release(1.7) == 1 and ctl.arrival(3) == 1.7
    store.next = 4
    assert ctl.release(1.8) == 2 and ctl.release(1.9) == 0  # none left


def test_each_loops_block_is_fitted_from_its_own_parts_runs(monkeypatch, tmp_path):
    # the default --part all: the decode block from the closed-loop grid's runs, the prefill block from the
    # burst runs (whose decode instance serves one-token requests, not the grid's regime)
    runs = [tmp_path / n for n in ("dp1-d0-c4-r0", "dp2-d1-c8-r0", "prefill-bursts-r0", "prefill-bursts-r1")]
    seen = []

    class Done:
        stdout = json.dumps({"profile": {}})

    monkeypatch.setattr(hs.subprocess, "run", lambda cmd, **kw: seen.append(cmd) or Done())
    hs.calibrate(runs, tmp_path / "p.yaml")
    hs.calibrate(runs[2:], tmp_path / "p.yaml", probe=True)
    hs.calibrate(runs[:2], tmp_path / "p.yaml")

    def given(cmd, flag):
        return [cmd[i + 1] for i, a in enumerate(cmd) if a == flag]
    assert given(seen[0], "--measurements") == [str(r) for r in runs[:2]]
    assert given(seen[0], "--host-prefill-measurements") == [str(r) for r in runs[2:]]
    assert "--host-probe" not in seen[0] and "--host-probe" in seen[1]
    for cmd, alone in ((seen[1], runs[2:]), (seen[2], runs[:2])):  # one part only: all its runs, both loops
        assert given(cmd, "--measurements") == [str(r) for r in alone]
        assert not given(cmd, "--host-prefill-measurements")
