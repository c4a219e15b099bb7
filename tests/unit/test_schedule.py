"""The schedule's pure parts: interval parsing, the sizing search over counted probes, GPU-hours."""
import pytest

from rackplan.sim.search import schedule as sch
from rackplan.specs import Layout, Plan, SpecError

pytestmark = pytest.mark.unit
BASE = Plan(name="b", model="deepseek-v3", hardware="h200-sxm", num_gpus=24,
            prefill=(Layout(role="prefill", dp=8),), decode=(Layout(role="decode", dp=16),))


@pytest.mark.parametrize("text, seconds", [("1h", 3600.0), ("30m", 1800.0), ("900s", 900.0), ("120", 120.0)])
def test_parse_interval(text, seconds):
    assert sch.parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["0h", "-1h", "1d", "h"])
def test_parse_interval_refuses(text):
    with pytest.raises(SpecError, match="--schedule"):
        sch.parse_interval(text)


def test_size_interval_grows_the_missing_pool_then_shrinks_each():
    """A probe passes with at least 3 prefill and 2 decode instances; it says which pool misses."""
    calls = []

    def run(c):
        calls.append((c["prefill"], c["decode"]))
        grow = tuple(p for p, need in (("prefill", 3), ("decode", 2)) if c[p] < need)
        return sch.Probe(not grow, 1.0, 0.01, grow)

    counts, res = sch.size_interval(BASE, {"prefill": 1, "decode": 4, "aggregated": 0}, run)
    assert (counts["prefill"], counts["decode"]) == (3, 2) and res.ok
    # grow prefill 1 -> 3; shrinking it to 2 reuses that probe; decode shrinks 4 -> 2 and fails at 1
    assert calls == [(1, 4), (2, 4), (3, 4), (3, 3), (3, 2), (3, 1)]


def test_size_interval_gives_up_at_the_growth_limit():
    counts, res = sch.size_interval(BASE, {"prefill": 1, "decode": 1, "aggregated": 0},
                                    lambda c: sch.Probe(False, None, None, ("prefill",)))
    assert counts["prefill"] == sch.MAX_GROWTH and not res.ok


def test_gpu_hours_and_transitions_by_hand():
    """Two hours: 1 prefill + 1 decode (24 GPUs), then 3 + 1 (40 GPUs); the two added prefill
    instances start 600 s early: 24 + 40 + 2 x 8 x 600 / 3600 = 66.67 GPU-hours; static: 40 x 2 = 80."""
    ivs = (sch.Interval(0, 3600, 10, 1.0, prefill=1, decode=1, gpus=24, meets_slo=True),
           sch.Interval(3600, 7200, 30, 3.0, prefill=3, decode=1, gpus=40, meets_slo=True))
    s = sch.Schedule("s", BASE, "t.csv", 3600.0, start_s=600.0, intervals=ivs)
    h = sch.gpu_hours(s)
    assert h["schedule"] == pytest.approx(24 + 40 + 2 * 8 * 600 / 3600)
    assert h["static"] == pytest.approx(80.0) and h["saved"] == pytest.approx(80 - h["schedule"])
    assert sch.transitions(s) == ["t = 1.00 h: start 2 prefill instance(s) at 0.83 h (600 s start-up, 16 GPUs)"]


def test_schedule_refuses_a_base_with_two_prefill_shapes():
    two = Plan(name="b", model="deepseek-v3", hardware="h200-sxm", num_gpus=40,
               prefill=(Layout(role="prefill", dp=8), Layout(role="prefill", dp=8)), decode=BASE.decode)
    with pytest.raises(SpecError, match="base"):
        sch.Schedule("s", two, "t.csv", 3600.0)
