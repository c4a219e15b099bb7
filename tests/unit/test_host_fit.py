"""The host fit (calibration/host_fit.py) recovers the host block that generated per-part records,
through the cost model's own HostModel; records become steps the way the executor writes them."""
import dataclasses

import numpy as np
import pytest

from rackplan.calibration.host_fit import (
    DP_WAIT,
    PROBE,
    WARMUP_STEPS,
    HostPredictor,
    fit_host_parts,
    fit_loops,
    host_steps,
    medians,
    probe_fit,
    probe_scaled,
    run_probes,
    steady,
)
from rackplan.specs import HostParams, load_hardware, load_model

pytestmark = pytest.mark.unit
MODEL, HW = load_model("tiny-moe-mtp"), load_hardware("cpu-local")
TRUE = HostParams(scheduler="central", schedule_step_s=120e-6, schedule_per_rank_s=30e-6, schedule_per_seq_s=9e-6,
                  schedule_per_admit_s=25e-6, schedule_spec_s=40e-6, prepare_step_s=20e-6,
                  prepare_per_seq_s=2e-6, prepare_per_token_s=0.5e-6, dp_sync_s=400e-6, dp_jitter=0.0,
                  sample_step_s=5e-6, sample_per_seq_s=1e-6, sample_per_draft_s=3e-6, spec_sync_s=8e-6,
                  output_step_s=15e-6, output_per_token_s=4e-6, output_per_finish_s=6e-6, output_spec_s=5e-6,
                  prepare_spec_s=-6e-6, output_per_seq_s=1.5e-6)


def _records(sizes=(1, 2, 3, 4, 6, 8, 12, 16), dps=(1, 2), depths=(0, 1, 2), steps=6, noise=0.02, seed=0):
    """Decode steps as the serving loop records them: the leader's parts once, the per-rank parts
    per rank, priced by TRUE (each rank with `size` sequences) with lognormal noise."""
    rng, out, pred = np.random.default_rng(seed), [], HostPredictor(MODEL, HW)
    for dp in dps:
        for depth in depths:
            acc = 1.0 + 0.7 * depth
            for b in sizes:
                for k in range(steps):
                    step = WARMUP_STEPS + len(out)  # every step after its instance's warm-up
                    shape = {"batch": b, "tokens": b * (1 + depth), "tokens_emitted": b * acc, "spec_depth": depth,
                             "seqs_global": b * dp, "tokens_global": b * dp * (1 + depth),
                             "emitted_global": b * dp * acc, "instance": f"decode-dp{dp}",
                             "admitted_global": b % 3, "finished_global": b // 2 % 2}
                    recs = [dict(shape, dp_rank=r) for r in range(dp)]
                    parts = None
                    for r, shp in enumerate(recs):
                        base = {"op": "", "role": "decode", "step": step, "rank": r, "instance_dp": dp,
                                "source": "measured", "shape": shp, "_run": k % 2}
                        if parts is None:
                            parts = _parts(pred, base, recs)
                        names = parts if r == 0 else ("host.prepare", "host.sample")
                        out += [dict(base, op=n, seconds=parts[n] * float(np.exp(rng.normal(0, noise))))
                                for n in names if n in parts]
    return out


def _parts(pred, base, recs):
    (s,) = host_steps([dict(base, op="host.prepare", seconds=1.0, shape=shp, rank=i) for i, shp in enumerate(recs)])
    parts = pred.parts(TRUE, s)
    return {k: v for k, v in parts.items() if k != "host.api_server" and v > 0 and
            not (k == "host.dp_sync" and s.dp == 1) and k != "host.launch"}


def test_records_become_steps_with_every_rank_and_the_instance():
    recs = _records(sizes=(4,), dps=(2,), depths=(1,), steps=1)
    (s,) = host_steps(recs)
    assert s.dp == 2 and s.depth == 1 and s.size == 4 and len(s.ranks) == 2
    assert s.whole.seqs == 8 and s.whole.drafts == 8 and s.ranks[0].tokens == 8
    assert set(s.parts) == {"host.schedule", "host.prepare", "host.sample", "host.output", "host.dp_sync", DP_WAIT}
    assert s.parts[DP_WAIT] == 0.0  # records without CPU time: all wall time is the collective's


def test_fit_recovers_the_generating_parts_and_holds_out_sizes():
    steps = host_steps(_records())
    assert all(s.steps == 6 for s in medians(steps))
    fit = fit_host_parts(HostPredictor(MODEL, HW), steps, HostParams(), "decode", {3, 6, 12})
    hp = fit.host
    assert hp.scheduler == "central"
    for name in ("schedule_step_s", "schedule_per_rank_s", "schedule_per_seq_s", "schedule_per_admit_s",
                 "schedule_spec_s", "output_per_token_s", "output_per_finish_s", "output_spec_s", "dp_sync_s",
                 "sample_per_draft_s", "spec_sync_s", "prepare_spec_s", "output_per_seq_s"):
        assert getattr(hp, name) == pytest.approx(getattr(TRUE, name), rel=0.1), name
    assert set(fit.held_error) == {"host.schedule", "host.prepare", "host.sample", "host.output", "host.dp_sync"}
    assert max(fit.held_error.values()) < 3.0 and max(fit.fit_error.values()) < 3.0  # 2% noise
    assert fit.points["host.schedule"] == (5 * 6, 3 * 6)  # 5 fit sizes x (dp, depth), 3 held out


def test_each_instances_warm_up_steps_are_left_out():
    # steps 0 .. WARMUP_STEPS - 1 of an instance run its host code cold: 3x slower here, left out
    recs = [{"op": "host.prepare", "role": "decode", "step": i, "rank": 0, "instance_dp": 1, "source": "measured",
             "seconds": 3e-5 if i < WARMUP_STEPS else 1e-5,
             "shape": {"batch": 4, "tokens": 4, "seqs_global": 4, "instance": "d"}} for i in range(WARMUP_STEPS + 6)]
    steps = host_steps(recs)
    assert len(steps) == WARMUP_STEPS + 6
    assert [s.index for s in steady(steps)] == list(range(WARMUP_STEPS, WARMUP_STEPS + 6))
    (shape,) = medians(steady(steps))
    assert shape.steps == 6 and shape.parts["host.prepare"] == pytest.approx(1e-5)


def test_steps_after_an_idle_wait_are_left_out():
    # every third step follows an idle wait of its loop (idle_before_s > 0): 2x slower here, left out of
    # the shapes; records without the field (loops that predate it) count as busy
    recs = [{"op": "host.prepare", "role": "prefill", "step": i, "rank": 0, "instance_dp": 1, "source": "measured",
             "seconds": 2e-5 if i % 3 == 0 else 1e-5,
             "shape": {"batch": 4, "tokens": 40, "seqs_global": 4, "instance": "p",
                       **({"idle_before_s": 0.02 * (i % 3 == 0)} if i < 20 else {})}}
            for i in range(WARMUP_STEPS, 26)]
    steps = host_steps(recs)
    assert [s.idle_s > 0 for s in steps] == [s.index % 3 == 0 and s.index < 20 for s in steps]
    busy = steady(steps)
    assert [s.index for s in busy] == [i for i in range(WARMUP_STEPS, 26) if i % 3 or i >= 20]
    (shape,) = medians(busy)
    assert shape.parts["host.prepare"] == pytest.approx(1e-5)
    assert len(steady(steps, busy=False)) == len(steps)


def test_a_part_without_enough_shapes_keeps_the_base():
    steps = host_steps(_records(sizes=(1, 2), dps=(1,), depths=(0,)))
    base = dataclasses.replace(HostParams(), output_step_s=7e-3)
    fit = fit_host_parts(HostPredictor(MODEL, HW), steps, base, "decode")
    assert fit.host.output_step_s == 7e-3 and "host.output" not in fit.fit_error


@pytest.mark.parametrize("admitted, extra_us", [((0, 0, 0, 2, 2), 0.0), ((2, 2, 2, 0, 0), 50.0)])
def test_a_shape_is_predicted_from_its_steps_as_it_is_measured(admitted, extra_us):
    # five steps of one shape (DP 1, 4 sequences), two or three of them admitting 2 requests (25 us each):
    # the median step costs 120 + 30 + 4 x 9 = 186 us, + 50 us where most steps admit
    recs = [{"op": "host.schedule", "role": "decode", "step": i, "rank": 0, "instance_dp": 1, "source": "measured",
             "seconds": 1e-4, "shape": {"batch": 4, "tokens": 4, "seqs_global": 4, "tokens_global": 4,
                                        "emitted_global": 4, "admitted_global": a, "instance": "d"}}
            for i, a in enumerate(admitted)]
    (shape,) = medians(host_steps(recs))
    got = HostPredictor(MODEL, HW).shape_part(TRUE, shape, "host.schedule", {})
    assert got == pytest.approx((186.0 + extra_us) * 1e-6)


def _drifting(slow=1.3, steady_parts=()):
    """_records with one run per (DP size, sequences, repeat) as a sweep has, each run 1, slow ** 0.5 or
    `slow` x slower (the VM's drift: all parts of a run together, but `steady_parts`), and each run's probe
    records saying so."""
    recs, runs = [], {}
    for r in _records(noise=0.0, steps=10):  # 5 steps a run and shape: MIN_STEPS
        run = runs.setdefault((r["instance_dp"], r["shape"]["batch"], r["_run"]), len(runs))
        f = slow ** (run % 3 / 2) if r["op"] not in steady_parts else 1.0
        recs.append(dict(r, _run=run, seconds=r["seconds"] * f))
        if r["op"] == "host.dp_sync":  # + a wait for the other ranks (not host work: not scaled)
            recs[-1]["cpu_s"], recs[-1]["seconds"] = r["seconds"] * f, r["seconds"] * f + 1e-4
    probes = [{"op": PROBE, "role": "serve", "source": "measured", "_run": run, "seconds": 3e-3,
               "cpu_s": 2e-3 * slow ** (run % 3 / 2) * (1 + 0.01 * phase), "step": phase}
              for run in runs.values() for phase in (0, 1)]
    return recs, probes


def test_the_probe_takes_a_runs_speed_out_of_every_part_but_the_dp_wait():
    recs, probes = _drifting()
    steps = host_steps(recs)
    probe = run_probes(probes)
    assert probe[0] == pytest.approx(2.01e-3) and probe[2] == pytest.approx(2.01e-3 * 1.3)
    scaled, ref = probe_scaled(steps, probe)
    assert ref == pytest.approx(np.median(list(probe.values())))
    for a, b in zip(steps, scaled):
        f = ref / probe[a.run]
        assert b.parts.get(DP_WAIT) == a.parts.get(DP_WAIT) and a.parts.get(DP_WAIT, 1e-4) == pytest.approx(1e-4)
        assert all(b.parts[n] == pytest.approx(v * f) for n, v in a.parts.items() if n != DP_WAIT)
    pred = HostPredictor(MODEL, HW)
    raw = fit_host_parts(pred, steps, HostParams(), "decode", {3, 6, 12})
    fit = fit_host_parts(pred, scaled, HostParams(), "decode", {3, 6, 12})
    assert max(fit.held_error.values()) < 1.0 < 4.0 < min(raw.held_error.values())  # the drift is all the error
    k = ref / 2.01e-3  # the block is in seconds at the runs' median probe
    for name in ("schedule_per_seq_s", "output_per_token_s", "dp_sync_s"):
        assert getattr(fit.host, name) == pytest.approx(getattr(TRUE, name) * k, rel=0.05), name


def test_each_part_follows_the_probe_as_far_as_its_fit_set_runs_do():
    # host.output does not drift with the probe here: its slope comes out 0, the others' 1, learnt on the fit
    # set's runs; the held-out runs are scaled by their own probes
    recs, probes = _drifting(steady_parts=("host.output",))
    steps, probe = host_steps(recs), run_probes(probes)
    pred = HostPredictor(MODEL, HW)
    fit = probe_fit(pred, steps, HostParams(), "decode", {3, 6, 12}, probe)
    assert fit.slopes["host.output"] == pytest.approx(0.0, abs=0.05)
    assert fit.slopes["host.schedule"] == pytest.approx(1.0, abs=0.05) and fit.probe_ref == pytest.approx(
        np.median(list(probe.values())))
    assert max(fit.held_error.values()) < 1.0
    full = fit_host_parts(pred, probe_scaled(steps, probe)[0], HostParams(), "decode", {3, 6, 12})
    assert full.held_error["host.output"] > 4.0  # every part scaled fully: output gets the drift it did not have
    assert probe_fit(pred, steps, HostParams(), "decode", {3, 6, 12}).probe_ref is None  # no probes: as measured


def test_a_run_without_a_probe_leaves_every_run_as_measured():
    recs, probes = _drifting()
    steps = host_steps(recs)
    probe = run_probes(probes)
    del probe[3]
    assert probe_scaled(steps, probe) == (steps, None)


def test_each_loop_is_fitted_from_its_own_runs():
    # runs 0-1: the decode grid (priced by TRUE); run 2: a prefill sweep whose decode instance runs other
    # requests at other sizes, 2x dearer here: with prefill_runs the decode block ignores it, without it is
    # pulled off
    grid = _records(noise=0.0)
    other = [dict(r, _run=2, seconds=2 * r["seconds"]) for r in _records(sizes=(5, 7, 10, 14), noise=0.0)]
    steps = host_steps(grid + other)
    pred = HostPredictor(MODEL, HW)
    dec, pre = fit_loops(pred, steps, HostParams(), HostParams(), {3, 6, 12}, prefill_runs={2})
    assert max(dec.held_error.values()) < 1.0 and not pre.points  # the prefill runs hold no prefill steps here
    mixed, _ = fit_loops(pred, steps, HostParams(), HostParams(), {3, 6, 12})
    assert max(mixed.fit_error.values()) > 5.0
