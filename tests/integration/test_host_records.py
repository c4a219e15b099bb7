"""A real serving run (real ranks, gloo) records every host part of every step, on the ranks that
do that work, with wall and CPU time; `calibrate --host-sweep` reads them back as steps."""
from collections import defaultdict

import pytest
import yaml

from rackplan.calibration.host_fit import host_steps
from rackplan.calibration.io import read_measurements
from rackplan.cli import main
from rackplan.specs import load_profile

pytestmark = pytest.mark.integration
HOST = {"cuda_graphs": False, "async_scheduling": False}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostrec")
    wl = tmp / "wl.yaml"
    wl.write_text(yaml.safe_dump({"name": "c8", "arrival": {"kind": "concurrency", "concurrency": 8},
                                  "isl": {"kind": "fixed", "value": 16}, "osl": {"kind": "fixed", "value": 12},
                                  "num_requests": 16, "seed": 0}))
    plan = tmp / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "name": "host-rec", "model": "tiny-moe-mtp", "hardware": "cpu-local", "num_gpus": 3, "workload": str(wl),
        "profile": "cpu-local",
        "prefill": [{"role": "prefill", "dp": 1, "max_tokens_per_step": 256, "max_batch_per_rank": 16, **HOST}],
        "decode": [{"role": "decode", "dp": 2, "max_batch_per_rank": 8, "max_tokens_per_step": 32,
                    "speculation": {"num_tokens": 1, "acceptance_length": 1.8}, **HOST}]}))
    out = tmp / "run"
    assert main(["execute", "--plan", str(plan), "--device", "cpu", "--workload", str(wl), "--out", str(out)]) == 0
    return tmp, read_measurements(out)


def test_every_step_records_its_host_parts_where_they_run(run):
    _, recs = run
    by_step = defaultdict(dict)
    for r in recs:
        if r["role"] == "decode" and r["op"].startswith("host.") and r["op"] != "host.exposed":
            by_step[r["step"]].setdefault(r["shape"]["dp_rank"], set()).add(r["op"])
            assert 0.0 <= r["cpu_s"] <= r["seconds"] * 1.05 + 1e-4  # a thread's CPU time fits in its wall time
    assert by_step and all(ranks[0] == {"host.schedule", "host.prepare", "host.dp_sync", "host.sample",
                                        "host.output"} and ranks[1] == {"host.prepare", "host.sample"}
                           for ranks in by_step.values())
    steps = [s for s in host_steps(recs) if s.role == "decode"]
    assert len(steps) == len(by_step) and all(s.dp == 2 and s.depth == 1 for s in steps)
    assert max(s.whole.seqs for s in steps) == 8 and all(s.whole.drafts == s.whole.seqs for s in steps)
    # every one of the 16 requests enters the decode instance's running set once and leaves it once;
    # in between it runs, so the running set changes by exactly the admissions less the finishes
    assert sum(s.whole.admitted for s in steps) == 16 and sum(s.whole.finished for s in steps) == 16
    for prev, cur in zip(steps, steps[1:]):
        assert cur.whole.seqs == prev.whole.seqs - prev.whole.finished + cur.whole.admitted
    assert all(isinstance(r["gc"], int) and r["gc"] >= 0 for r in recs if "cpu_s" in r)  # GC runs per step
    # a closed loop's prefill waits idle between arrivals: the steps after such a wait say how long it was
    pre = [s for s in host_steps(recs) if s.role == "prefill"]
    assert all(s.idle_s >= 0 for s in pre + steps) and pre[0].idle_s == 0 and any(s.idle_s > 0 for s in pre)


def test_host_sweep_calibration_writes_the_host_block(run):
    tmp, _ = run
    out = tmp / "host.yaml"
    assert main(["calibrate", "--host-sweep", "--base", "cpu-local", "--measurements", str(tmp / "run"),
                 "--out", str(out)]) == 0
    prof = load_profile(out)
    fit = prof.provenance["host_fit"]
    assert prof.host.scheduler == "central" and fit["steps"] > 10
    assert set(fit["fit_error_pct"]) <= set(prof.fit_error)
