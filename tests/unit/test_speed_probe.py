"""The rig's CPU speed as a measured input (calibration/speed.py, HardwareSpec.cpu_speed): calibration puts every
run at one reference speed, and the simulator prices a run at its own. Expected values derived by hand."""
import dataclasses

import pytest

from rackplan.calibration.fit import Fitter, fit_profile
from rackplan.calibration.samples import split_holdout, step_samples
from rackplan.calibration.speed import at_reference, normalise, profile_reference, speed_factor
from rackplan.calibration.synthetic import synth_records
from rackplan.sim.cost.host import intake_seconds
from rackplan.sim.cost.step import CostContext, decode_step, prefill_step
from rackplan.specs import SpecError, load_hardware, load_model, load_plan, load_profile

pytestmark = pytest.mark.unit
PLAN = load_plan("tiny-cpu")
MODEL = load_model("tiny-moe")
TRUE = load_profile("cpu-local")
CPU = load_hardware("cpu-local")


def _probe(run: int, cpu_s: float, step: int = 2) -> dict:
    return {"op": "host.probe", "role": "serve", "source": "measured", "step": step, "seconds": cpu_s * 1.01,
            "cpu_s": cpu_s, "shape": {"in_place": True}, "_run": run}


def test_each_run_is_put_at_the_median_probe_by_hand():
    # run 0 probes 5, 5, 6 ms (its speed: the median, 5 ms); run 1 probes 7.5 ms: the reference is the median over
    # the runs, (5 + 7.5) / 2 = 6.25 ms, so run 0 is at factor 5 / 6.25 = 0.8 and run 1 at 7.5 / 6.25 = 1.2.
    # The same op measured 10 ms in run 0 and 15 ms in run 1 (the same work, 1.5x slower) is 10 / 0.8 = 12.5 ms
    # and 15 / 1.2 = 12.5 ms at the reference; a request's timeline and the probes stay as measured
    recs = [_probe(0, 5e-3), _probe(0, 5e-3, 3), _probe(0, 6e-3, 4), _probe(1, 7.5e-3),
            {"op": "attn.core", "role": "decode", "source": "measured", "seconds": 0.010, "cpu_s": 0.009, "_run": 0,
             "shape": {}},
            {"op": "attn.core", "role": "decode", "source": "measured", "seconds": 0.015, "_run": 1, "shape": {}},
            {"op": "request", "role": "serve", "source": "measured", "seconds": 0.2, "_run": 1, "shape": {}}]
    out, info = normalise(recs)
    assert info["ref_cpu_s"] == pytest.approx(6.25e-3)
    assert info["factor_min_median_max"] == [0.8, 1.0, 1.2]
    assert out[4]["seconds"] == pytest.approx(0.0125) and out[4]["cpu_s"] == pytest.approx(0.009 / 0.8)
    assert out[5]["seconds"] == pytest.approx(0.0125)
    assert out[6] == recs[6] and out[:4] == recs[:4]
    # a run without a probe: nothing is scaled (the probed runs would otherwise sit at another speed)
    same, none = normalise(recs[:4] + [dict(recs[4], _run=2)])
    assert none["ref_cpu_s"] is None and same[4]["seconds"] == 0.010
    # validate: at a profile's reference 5 ms, run 1 (7.5 ms) is 1.5x slow: 15 ms -> 10 ms
    prof = dataclasses.replace(TRUE, provenance={"speed_probe": {"ref_cpu_s": 5e-3}})
    assert profile_reference(prof) == 5e-3 and profile_reference(TRUE) is None
    assert at_reference(recs, prof)[5]["seconds"] == pytest.approx(0.010)
    assert at_reference(recs, TRUE) is recs
    # a served segment whose probes read 6, 6.5 and 7 ms against that 5 ms reference runs at 6.5 / 5 = 1.3
    seg = [_probe(0, 6e-3), _probe(0, 7e-3), _probe(0, 6.5e-3), recs[4]]
    assert speed_factor(seg, 5e-3) == pytest.approx(1.3)
    assert speed_factor([recs[4]], 5e-3) is None


def _runs(slow: set[tuple[int, int]], scale: float = 1.5, rounds: int = 3) -> list[dict]:
    """A synthetic sweep in `rounds` rounds, each point (one step shape: synth_records' step index) its own run,
    as plan_to_hardware executes each sweep point; the points (round, step) in `slow` ran `scale` x slower
    (every op and the step), every point with in-place probes reading 5 ms x its speed."""
    out = []
    for rnd in range(rounds):
        for r in synth_records(PLAN, TRUE, decode_batches=(1, 2, 4, 8, 16), repeats=1, noise=0.0):
            k = scale if (rnd, r["step"]) in slow else 1.0
            out.append(dict(r, seconds=r["seconds"] * k, _run=100 * rnd + r["step"]))
            if r["rank"] == 0 and r["op"] == "step":  # the point's probes (the sweep's record fields)
                out += [dict(r, **_probe(100 * rnd + r["step"], 5e-3 * k, j)) for j in (2, 3, 4)]
    return out


def _decode_s(prof, hw=CPU) -> float:
    return decode_step(CostContext(MODEL, hw, PLAN.decode[0], prof), 8, 8 * 64).seconds


def _fit(recs: list[dict]):
    fit, _ = split_holdout(step_samples(recs, PLAN), {"decode": {4}})
    return fit_profile(Fitter(PLAN, MODEL, CPU, fit), TRUE, "fitted")


def test_a_sweep_with_slow_points_fits_the_profile_of_one_without():
    # decode b8 (step 3) ran 1.5x slower in two of its three rounds (its probes 7.5 ms against 5 ms): the median
    # probe over the 27 points is 5 ms, so those two runs are scaled by 5 / 7.5 and every run's records equal the
    # steady sweep's: the same fit exactly
    steady, _ = normalise(_runs(set()))
    drifted, info = normalise(_runs({(0, 3), (1, 3)}))
    assert info["ref_cpu_s"] == pytest.approx(5e-3) and info["runs"] == 27
    base, fitted = _fit(steady), _fit(drifted)
    assert _decode_s(fitted) == pytest.approx(_decode_s(base), rel=1e-9) and fitted.fit_error == base.fit_error
    # as measured (the probes left out), b8's median run is a slow one: the fit misses its steps (step MAPE over
    # the 8 fitted shapes ~4.5%, where the others fit exactly) and moves its price: the check can fail
    raw = _fit([r for r in _runs({(0, 3), (1, 3)}) if r["op"] != "host.probe"])
    assert raw.fit_error["step"] > 2.0 > 0.1 > base.fit_error["step"]
    assert abs(_decode_s(raw) / _decode_s(base) - 1.0) > 0.005
    # a sweep entirely at 1.5x (probes 7.5 ms) put at a 5 ms reference (validate: the profile's) is every run x
    # 5 / 7.5: the steady sweep's records, the same fit
    every = {(rnd, k) for rnd in range(3) for k in range(9)}
    ref5 = dataclasses.replace(TRUE, provenance={"speed_probe": {"ref_cpu_s": 5e-3}})
    assert _decode_s(_fit(at_reference(_runs(every), ref5))) == pytest.approx(_decode_s(base), rel=1e-9)


def test_a_segment_at_speed_1_3_prices_its_steps_1_3x():
    # HardwareSpec.cpu_speed: every step's seconds (device and host alike) x 1.3, the excess shown as the op
    # cpu.speed; a prefill instance's intake of 3 arrivals at 1 ms each x 1.3 = 3.9 ms
    slow = dataclasses.replace(CPU, cpu_speed=1.3)
    lay = PLAN.decode[0]
    base = decode_step(CostContext(MODEL, CPU, lay, TRUE), 8, 8 * 64)
    got = decode_step(CostContext(MODEL, slow, lay, TRUE), 8, 8 * 64)
    assert got.seconds == pytest.approx(1.3 * base.seconds, rel=1e-12)
    ops = {op.name: op.seconds for op in got.ops}
    assert ops["cpu.speed"] == pytest.approx(0.3 * base.seconds, rel=1e-12) and "cpu.speed" not in \
        {op.name for op in base.ops}
    assert sum(ops.values()) == pytest.approx(got.seconds, rel=1e-9)
    pre = PLAN.prefill[0]
    assert prefill_step(CostContext(MODEL, slow, pre, TRUE), [128]).seconds == \
        pytest.approx(1.3 * prefill_step(CostContext(MODEL, CPU, pre, TRUE), [128]).seconds, rel=1e-12)
    hp = dataclasses.replace(TRUE.host, schedule_per_arrival_s=1e-3)
    assert intake_seconds(hp, 3) * slow.cpu_speed == pytest.approx(3.9e-3)


def test_cpu_speed_is_a_cpu_rigs_positive_factor():
    with pytest.raises(SpecError, match="cpu_speed"):
        dataclasses.replace(CPU, cpu_speed=0.0)
    with pytest.raises(SpecError, match="cpu_speed"):
        dataclasses.replace(load_hardware("h100-sxm"), cpu_speed=1.3)
    assert dataclasses.replace(CPU, cpu_speed=0.8).cpu_speed == 0.8  # faster than the fit's reference
