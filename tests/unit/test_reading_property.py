"""Property: a mutated plan, profile, workload, trace or measurement file read by its reader is
either accepted or refused with one SpecError of one line, never another exception."""
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rackplan.calibration.io import read_table, read_vllm_bench
from rackplan.calibration.synthetic import synth_records
from rackplan.executor.schema import read_measurements
from rackplan.sim.traces import read_trace
from rackplan.specs import SpecError, load_plan, load_profile, load_workload

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TOKENS = ["-", "-1", "0", "1e999", ".inf", ".nan", "NaN", "Infinity", "[", "]", "{", "}", ":", ",", "\n", "  ",
          "'", '"', "\x00", "~", "null", "true", "&a ", "*a", "!!python/object:os.system", "é", "#", "<<: *a",
          "[[[[[[[[[[", "99999999999999999999999"]


def _measurements() -> bytes:
    recs = synth_records(load_plan("tiny-cpu"), load_profile("cpu-local"), decode_batches=(1, 2), prefill_tokens=(32,),
                         repeats=1)
    return "".join(json.dumps(r) + "\n" for r in recs).encode()


SOURCES = {
    "plan": ((ROOT / "configs/plans/tiny-cpu.yaml").read_bytes(), ".yaml", load_plan),
    "profile": ((ROOT / "configs/profiles/cpu-local.yaml").read_bytes(), ".yaml", load_profile),
    "workload": ((ROOT / "configs/workloads/tiny-chat.yaml").read_bytes(), ".yaml", load_workload),
    "azure trace": ((DATA / "azure_llm_2024.csv").read_bytes(), ".csv", read_trace),
    "mooncake trace": ((DATA / "mooncake_prefix.jsonl").read_bytes(), ".jsonl", read_trace),
    "vllm bench trace": ((DATA / "vllm_bench_detailed.json").read_bytes(), ".json", read_trace),
    "vllm bench summary": ((DATA / "vllm_bench_summary.json").read_bytes(), ".json", read_vllm_bench),
    "a2a table": ((ROOT / "calibration/data/deepep_h800_a2a.csv").read_bytes(), ".csv", read_table),
    "measurements": (_measurements(), ".jsonl", read_measurements),
}

edit = st.tuples(st.floats(0, 1), st.integers(0, 40),
                 st.one_of(st.sampled_from(TOKENS).map(str.encode), st.binary(min_size=1, max_size=4)))


def mutate(data: bytes, edits, cut) -> bytes:
    """Replace short spans with tokens or bytes, then maybe truncate (at a line end or anywhere)."""
    out = bytearray(data)
    for where, span, token in edits:
        i = int(where * len(out))
        out[i:i + span] = token
    if cut is not None:
        n = int(cut * len(out))
        line_end = out.rfind(b"\n", 0, n)
        out = out[:line_end + 1] if cut < 0.5 and line_end > 0 else out[:n]
    return bytes(out)


@pytest.mark.parametrize("name", sorted(SOURCES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(edit, min_size=1, max_size=4), cut=st.one_of(st.none(), st.floats(0.05, 1)))
def test_mutated_file_is_read_or_refused_in_one_line(tmp_path, name, edits, cut):
    text, suffix, reader = SOURCES[name]
    path = tmp_path / f"mutated{suffix}"
    path.write_bytes(mutate(text, edits, cut))
    try:
        reader(path)
    except SpecError as exc:
        assert len(str(exc).splitlines()) == 1, str(exc)
