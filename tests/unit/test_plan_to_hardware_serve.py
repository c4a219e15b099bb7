"""benchmarks/plan_to_hardware.py's serving: the rates served in segments interleaved across the rates (a
seeded order), each segment its own requests, and a rate's segments' steady-state windows pooled."""
import numpy as np
import pytest
import yaml
from bench_scripts import script

from rackplan.specs import load_plan, load_workload, resolve_path

p2h = script("plan_to_hardware.py")

pytestmark = pytest.mark.unit


def test_every_rate_is_served_once_a_round_and_in_every_place_of_a_round():
    order = p2h.serve_order(3, seed=1)
    assert len(order) == 9 and [seg for seg, _ in order] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    rounds = [[f for seg, f in order if seg == k] for k in range(3)]
    assert all(sorted(r) == sorted(p2h.RATES) for r in rounds)  # each round: every rate once
    for f in p2h.RATES:  # each rate once first, once second, once third of a round
        assert sorted(r.index(f) for r in rounds) == [0, 1, 2]
        # so every rate's mean place in the whole order is the same: (0 + 1 + ... + 8) / 9 = 4
        assert np.mean([i for i, (_, g) in enumerate(order) if g == f]) == 4.0
    assert p2h.serve_order(3, seed=1) == order  # seeded: the same order again
    assert len({tuple(f for _, f in p2h.serve_order(3, seed=s)[:3]) for s in range(8)}) > 1  # the shuffle moves


def test_a_segment_draws_its_own_requests(tmp_path):
    plan = load_plan("tiny-cpu")
    first = load_workload(p2h.workload_at(plan, 40.0, 8.0, tmp_path))
    third = load_workload(p2h.workload_at(plan, 40.0, 8.0, tmp_path, segment=2))
    base = yaml.safe_load((tmp_path / f"{first.name}.yaml").read_text())["seed"]
    assert third.seed == base + 2 and third.name == first.name + "-s2"
    assert third.num_requests == first.num_requests == 320  # 8 s at 40 req/s


def _part(ttft, tpot, tokens, length, stable=True):
    return {"window_s": [0.0, length], "length_s": length, "stable": stable, "tokens": tokens,
            "ttft_s": np.array(ttft, float), "tpot_s": np.array(tpot, float)}


def test_a_rates_segments_are_pooled_request_by_request():
    a = _part([1.0, 2.0, 3.0], [0.1, 0.2, np.nan], tokens=300.0, length=2.0)
    b = _part([4.0, 5.0], [0.3, 0.5], tokens=100.0, length=3.0, stable=False)
    got = p2h.pooled([a, b], num_gpus=2)
    # 400 tokens over 5 s of windows on 2 GPUs (not the mean of 150 and 33.3 tok/s per segment per GPU)
    assert got["output_tps_per_gpu"] == pytest.approx(40.0)
    assert got["ttft_p50_s"] == 3.0  # the median of 1..5 (the segments' own medians are 2 and 4.5)
    assert got["tpot_p50_s"] == pytest.approx(0.25)  # of 0.1, 0.2, 0.3, 0.5: the request without one left out
    assert got["ttft_p90_s"] == pytest.approx(4.6)  # numpy's linear percentile of 1..5
    assert got["window_requests"] == 5 and got["segments"] == 2
    assert not got["stable"]  # one segment's queue grew


def test_a_segment_at_speed_1_3_is_simulated_with_every_step_1_3x(tmp_path):
    # one request alone (nothing queues): after its first token its decode steps run back to back, so its
    # finish - first token is the sum of (osl - 1) decode step prices, each x 1.3 at cpu_speed 1.3
    # (HardwareSpec.cpu_speed, the segment's probe over the fit's reference); its prefill step x 1.3 too, so
    # prefill_done - arrival (the prefill step, no intake priced in the shipped profile) is 1.3x as well
    plan = resolve_path("plans", "tiny-disagg")
    wl = tmp_path / "one.yaml"
    wl.write_text(yaml.safe_dump({"name": "one", "arrival": {"kind": "poisson", "rate": 1.0}, "num_requests": 1,
                                  "isl": {"kind": "fixed", "value": 64}, "osl": {"kind": "fixed", "value": 9},
                                  "seed": 0}))
    prof = resolve_path("profiles", "cpu-local")
    ref = p2h.simulated_requests(plan, wl, prof)
    slow = p2h.simulated_requests(plan, wl, prof, 1.3)
    decode = lambda r: r["finish"] - r["first_token"]  # noqa: E731
    prefill = lambda r: r["prefill_done"] - r["arrival"]  # noqa: E731
    assert decode(ref)[0] > 0 and decode(slow)[0] == pytest.approx(1.3 * decode(ref)[0], rel=1e-6)
    assert prefill(slow)[0] == pytest.approx(1.3 * prefill(ref)[0], rel=1e-6)
