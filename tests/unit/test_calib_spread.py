"""`rackplan calibrate` measures the step-time spread (calibration/spread.py) and writes it to the profile with
its provenance. Expected values derived by hand: residuals 0.1 k for k = -10 .. 10 (21 steps of one shape, median
at k = 0) have p10 -0.8 and p90 +0.8 (numpy's linear percentiles of an evenly spaced set), so
sd = 1.6 / (2 x 1.2816) = 0.6243; consecutive residuals of a rising series correlate fully (capped at 0.95),
of an alternating one negatively (no correlation given: independent steps)."""
import math

import numpy as np
import pytest

from rackplan.calibration.samples import StepSample
from rackplan.calibration.spread import step_spread
from rackplan.calibration.synthetic import synth_records, write_jsonl
from rackplan.cli import main
from rackplan.sim.cost.step import RankBatch
from rackplan.specs import load_plan, load_profile

pytestmark = pytest.mark.unit
SD = 1.6 / (2 * 1.2815516)


def _steps(role: str, size: int, logs: list[float], run: int = 0, med: float = 0.01) -> list[StepSample]:
    rb = RankBatch(np.full(1, float(size)), np.full(1, 64.0 * size))
    return [StepSample(role, size, rb, {}, med * math.exp(x), 0.0, steps=[i], run=run) for i, x in enumerate(logs)]


def test_sd_from_the_quantiles_and_correlation_of_consecutive_steps():
    rising = [0.1 * k for k in range(-10, 11)]
    alternating = [0.8 * (-1) ** i for i in range(20)]
    sd, corr, info = step_spread(_steps("decode", 4, rising) + _steps("prefill", 64, alternating))
    assert sd["decode"] == pytest.approx(SD, rel=1e-3)
    assert corr == {"decode": 0.95}  # a rising series: correlation 1, capped; alternating: -1, not given
    # alternating +-0.8 about a median of 1 (even count: the median is exp(0) between them): p10 -0.8, p90 +0.8
    assert sd["prefill"] == pytest.approx(0.8 / 1.2815516, rel=1e-3)
    assert info["decode"]["steps"] == 21 and info["decode"]["pairs"] == 20


def test_serving_steps_and_lone_shapes_are_not_read():
    serve = [StepSample("decode", 4, s.rb, {}, s.step_s, 0.0, steps=s.steps, serve=True)
             for s in _steps("decode", 4, [0.1 * k for k in range(30)])]
    lone = [s for size in range(1, 20) for s in _steps("decode", size, [0.5 * size])]
    assert step_spread(serve + lone) == ({}, {}, {})


def test_calibrate_writes_the_spread_and_its_provenance(tmp_path):
    plan = load_plan("tiny-cpu")
    recs = synth_records(plan, load_profile("datasheet"), decode_batches=(1, 2, 4, 8), prefill_tokens=(32, 64, 128),
                         repeats=21, noise=0.0)
    order: dict[tuple, dict[int, int]] = {}  # the k-th step of a shape runs exp(0.1 (k - 10)) x its price
    for r in recs:
        if r["op"] == "step":
            steps = order.setdefault((r["role"], r["shape"]["batch"], r["shape"]["tokens"]), {})
            r["seconds"] *= math.exp(0.1 * (steps.setdefault(r["step"], len(steps)) - 10))
    out = tmp_path / "fit.yaml"
    rc = main(["calibrate", "--plan", "tiny-cpu", "--measurements", str(write_jsonl(recs, tmp_path / "m.jsonl")),
               "--holdout", "decode:2", "--out", str(out)])
    assert rc == 0
    prof = load_profile(out)
    assert prof.step_time_spread == pytest.approx({"decode": SD, "prefill": SD}, rel=1e-3)
    assert prof.step_time_corr == {"decode": 0.95, "prefill": 0.95}
    prov = prof.provenance["step_time_spread"]
    assert prov["decode"]["steps"] == 3 * 21 and prov["prefill"]["steps"] == 3 * 21  # the fit set's shapes only
    assert "calibration/spread.py" in prov["method"]


def test_serving_steps_give_the_spread_about_the_fitted_price_when_there_are_enough():
    # 21 serving steps at 2 x exp(0.1 k) times a price of 0.01 s: r = log 2 + 0.1 k, less its median: 0.1 k
    rising = [StepSample("decode", 4, s.rb, {}, 2 * s.step_s, 0.0, steps=s.steps, serve=True)
              for s in _steps("decode", 4, [0.1 * k for k in range(-10, 11)])]
    sweep = _steps("decode", 8, [0.8 * (-1) ** i for i in range(20)])  # the sweep alone would give corr -1
    sd, corr, info = step_spread(rising + sweep, price=lambda s: 0.01)
    assert sd == {"decode": pytest.approx(SD, rel=1e-3)} and corr == {"decode": 0.95}
    assert info["decode"]["source"] == "serving" and info["decode"]["p10_p50_p90"][1] == pytest.approx(0.0, abs=1e-9)
    # fewer than 10 serving steps: the sweep's
    sd, corr, info = step_spread(rising[:9] + sweep, price=lambda s: 0.01)
    assert info["decode"]["source"] == "sweep" and sd["decode"] == pytest.approx(0.8 / 1.2815516, rel=1e-3)
    assert corr == {}
