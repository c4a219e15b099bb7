"""The workload a `vllm bench serve` result describes: its own lengths (per request with
--save-detailed, else its means, said so) at its request rate or concurrency."""
import json
from pathlib import Path

import pytest

from rackplan.calibration.bench_workload import bench_workload
from rackplan.calibration.io import read_vllm_bench
from rackplan.sim.workload import make_requests
from rackplan.specs import SpecError, load_plan

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[1] / "data"
PLAN = load_plan("tiny-cpu")


def test_detailed_result_as_a_trace_workload_replays_each_request():
    """A --save-detailed result is also a trace format of its own (sim/traces.py 'vllm_bench')."""
    from rackplan.specs import Arrival, LengthDist, Workload

    wl = Workload(name="b", arrival=Arrival(kind="concurrency", concurrency=2), isl=LengthDist(kind="trace"),
                  osl=LengthDist(kind="trace"), trace=str(DATA / "vllm_bench_detailed.json"),
                  trace_format="vllm_bench", num_requests=5)
    r = make_requests(wl)
    assert list(r.isl) == [32, 64, 96, 80, 40] and list(r.osl) == [8, 12, 16, 10, 6]  # the failed one dropped


def test_summary_result_uses_its_means_and_says_so():
    bench = read_vllm_bench(DATA / "vllm_bench_summary.json")
    assert bench["detailed"] is False
    wl = bench_workload(bench, PLAN)
    assert (wl.isl.kind, wl.isl.value, wl.osl.value) == ("fixed", 60, 10)  # 360 / 6 in, 60 / 6 out
    assert wl.arrival.kind == "poisson" and wl.arrival.rate == 4.0 and wl.num_requests == 6
    assert "mean lengths of 6 requests: 60 in / 10 out" in wl.description


def _bench(tmp_path, **kw):
    data = json.loads((DATA / "vllm_bench_summary.json").read_text())
    data.update(kw)
    p = tmp_path / "b.json"
    p.write_text(json.dumps(data))
    return read_vllm_bench(p)


def test_unlimited_rate_sends_everything_at_once(tmp_path):
    wl = bench_workload(_bench(tmp_path, request_rate="inf"), PLAN)
    assert wl.arrival.kind == "concurrency" and wl.arrival.concurrency == 6
    assert "all 6 requests at once" in wl.description
    wl = bench_workload(_bench(tmp_path, burstiness=0.5), PLAN)
    assert "burstiness 0.5 simulated as 1" in wl.description


@pytest.mark.parametrize("kw,field", [({"request_rate": "fast"}, "request_rate"),
                                      ({"request_rate": -1}, "request_rate"),
                                      ({"total_input_tokens": None}, "total_input_tokens"),
                                      ({"completed": 0}, "completed")])
def test_bad_bench_fields(tmp_path, kw, field):
    with pytest.raises(SpecError) as exc:
        bench_workload(_bench(tmp_path, **kw), PLAN)
    assert exc.value.field == field
