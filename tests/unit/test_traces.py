"""Trace readers, one per public format (samples in tests/data, written from each format's public
description), format detection, and one-line errors naming the file line and the column."""
import typing
from pathlib import Path

import numpy as np
import pytest

from rackplan.sim.traces import READERS, azure_time, detect_format, read_trace
from rackplan.sim.workload import make_requests
from rackplan.specs import Arrival, LengthDist, SpecError, Workload

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[1] / "data"


def trace_wl(name, **kw):
    base = dict(name="w", arrival=Arrival(kind="trace"), isl=LengthDist(kind="trace"), osl=LengthDist(kind="trace"),
                trace=str(DATA / name))
    base.update(kw)
    return Workload(**base)


def test_format_names_are_the_workload_vocabulary():
    assert typing.get_args(typing.get_type_hints(Workload)["trace_format"]) == ("auto", *READERS)


@pytest.mark.parametrize("name,fmt", [("azure_llm_2023.csv", "azure"), ("azure_llm_2024.csv", "azure"),
                                      ("burstgpt.csv", "burstgpt"), ("mooncake_prefix.jsonl", "mooncake"),
                                      ("requests.jsonl", "jsonl"), ("vllm_bench_detailed.json", "vllm_bench")])
def test_detect_format(name, fmt):
    assert detect_format(DATA / name) == fmt


def test_azure_2023():
    t = read_trace(DATA / "azure_llm_2023.csv")
    # 18:15:46.6805900, 18:15:47.0000000, 18:15:50.9951690, 18:15:52.5732450 (sorted by time)
    assert t.arrival_s == pytest.approx([0.0, 0.31941, 4.314579, 5.892655], abs=1e-9)
    assert list(t.isl) == [374, 879, 396, 91] and list(t.osl) == [44, 1, 109, 16]  # GeneratedTokens 0 -> 1
    assert t.blocks is None


def test_azure_2024_offsets_and_whole_seconds():
    t = read_trace(DATA / "azure_llm_2024.csv")
    assert t.arrival_s == pytest.approx([0.0, 0.041683, 0.157988, 1.248279], abs=1e-9)
    assert list(t.isl) == [1452, 584, 862, 617] and list(t.osl) == [3, 3, 38, 104]


def test_azure_time_forms():
    assert azure_time("2023-11-16 18:15:46.6805900") == (1700158546, pytest.approx(0.68059))
    assert azure_time("2024-05-12 00:00:00+00:00") == (1715472000, 0.0)
    assert azure_time("2024-05-12 02:00:00.5+02:00") == (1715472000, 0.5)  # the offset is honoured
    assert azure_time("2024-05-12T00:00:00Z") == azure_time("2024-05-11 23:00:00-0100") == (1715472000, 0.0)


def test_burstgpt_skips_failed_requests():
    t = read_trace(DATA / "burstgpt.csv")
    assert list(t.arrival_s) == [0.0, 40.0, 113.0, 180.0]  # Timestamp 5, 45, 118, 185 s
    assert list(t.isl) == [472, 1087, 417, 1360] and list(t.osl) == [18, 230, 276, 647]
    assert t.skipped == 1  # the row with 0 response tokens


def test_plain_jsonl_is_in_seconds():
    t = read_trace(DATA / "requests.jsonl")
    assert list(t.arrival_s) == [0.0, 0.25, 1.5] and list(t.isl) == [1200, 300, 4096] and t.blocks is None


def test_mooncake_ms_and_hash_ids():
    t = read_trace(DATA / "mooncake_prefix.jsonl")
    assert list(t.arrival_s) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]
    assert t.block_size == 512 and t.blocks[1] == (0, 1, 2, 3, 20, 21)
    assert all(len(b) == -(-n // 512) for b, n in zip(t.blocks, t.isl))  # ceil(input_length / 512) ids


def test_vllm_bench_lengths_drop_failures():
    t = read_trace(DATA / "vllm_bench_detailed.json")
    assert t.arrival_s is None and t.skipped == 1  # errors[2] = "TimeoutError"
    assert list(t.isl) == [32, 64, 96, 80, 40] and list(t.osl) == [8, 12, 16, 10, 6]


def test_limit_reads_the_first_requests():
    t = read_trace(DATA / "burstgpt.csv", limit=3)
    assert list(t.isl) == [472, 1087, 417]


def test_make_requests_from_each_format():
    r = make_requests(trace_wl("azure_llm_2023.csv", arrival=Arrival(kind="trace", time_scale=0.5)))
    assert len(r) == 4 and r.arrival_s[-1] == pytest.approx(5.892655 / 2) and r.blocks is None
    r = make_requests(trace_wl("mooncake_prefix.jsonl"), num_requests=3)
    assert len(r) == 3 and r.blocks == ((0, 1, 2, 3, 4, 5), (0, 1, 2, 3, 20, 21), (10, 11, 12, 13, 14, 15))
    assert r.block_size == 512 and not r.cached.any()  # hits come from the simulator's caches
    r = make_requests(trace_wl("vllm_bench_detailed.json", arrival=Arrival(kind="concurrency", concurrency=2)))
    assert list(r.isl) == [32, 64, 96, 80, 40] and np.isnan(r.arrival_s).all()


def test_lengths_sampled_ignore_hash_ids():
    r = make_requests(trace_wl("mooncake_prefix.jsonl", isl=LengthDist(kind="fixed", value=100), prefix_hit_rate=0.5))
    assert r.blocks is None and list(r.cached) == [50] * 8


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("name,text,where,field", [
    ("a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n", "a.csv", "GeneratedTokens"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,4\nyesterday,3,4\n",
     "a.csv:3", "TIMESTAMP"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,37.5,4\n", "a.csv:2", "ContextTokens"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,37\n", "a.csv:2", "GeneratedTokens"),
    ("b.csv", "Timestamp,Model,Request tokens,Total tokens,Log Type\n5,ChatGPT,472,490,API log\n", "b.csv",
     "Response tokens"),
    ("b.csv", "Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,472,18\n-1,GPT-4,4,4\n", "b.csv:3",
     "Timestamp"),
    ("b.csv", "Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,-472,18\n", "b.csv:2", "Request tokens"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
     '{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}\n', "m.jsonl:2", "hash_ids"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
     '{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": "12"}\n', "m.jsonl:2", "hash_ids"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}\n\n'
     '{"timestamp": 1, "output_length": 5, "hash_ids": [1]}\n', "m.jsonl:3", "input_length"),
    ("p.jsonl", '{"timestamp": 0, "input_length": 0, "output_length": 5}\n', "p.jsonl:1", "input_length"),
    ("p.jsonl", '{"timestamp": "noon", "input_length": 6, "output_length": 5}\n', "p.jsonl:1", "timestamp"),
    ("p.jsonl", '{"timestamp": 0, "input_length": 6, "output_length": 5}\n{"timestamp": 1,\n', "p.jsonl:2", "(line)"),
    ("v.json", '{"input_lens": [3, 4], "completed": 2}', "v.json", "output_lens"),
    ("v.json", '{"input_lens": [3, 4], "output_lens": [1]}', "v.json", "output_lens"),
    ("w.csv", "when,what\n1,2\n", "w.csv", "(header)"),
    ("t.txt", "1,2\n", "t.txt", "trace_format"),
])
def test_malformed_trace_names_line_and_column(tmp_path, name, text, where, field):
    p = write(tmp_path, name, text)
    with pytest.raises(SpecError) as exc:
        read_trace(p)
    msg = str(exc.value)
    assert exc.value.field == field and msg.startswith(str(tmp_path / where) + ":"), msg
    assert "\n" not in msg


def test_workload_trace_fields_checked(tmp_path):
    with pytest.raises(SpecError, match="block_size"):
        trace_wl("mooncake_prefix.jsonl", isl=LengthDist(kind="fixed", value=9), block_size=256)
    with pytest.raises(SpecError, match="trace_format"):
        Workload(name="w", arrival=Arrival(kind="poisson", rate=1.0), isl=LengthDist(kind="fixed", value=9),
                 osl=LengthDist(kind="fixed", value=9), trace_format="azure")
    with pytest.raises(SpecError, match="block_size.*no hash_ids"):
        make_requests(trace_wl("azure_llm_2023.csv", block_size=256))
    with pytest.raises(SpecError, match="prefix_hit_rate"):
        make_requests(trace_wl("mooncake_prefix.jsonl", prefix_hit_rate=0.3))
    with pytest.raises(SpecError, match="arrival.kind"):
        make_requests(trace_wl("vllm_bench_detailed.json"))
    with pytest.raises(SpecError, match="trace"):
        make_requests(trace_wl("missing.jsonl"))


def test_block_size_sets_the_hash_id_budget(tmp_path):
    p = write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}\n')
    with pytest.raises(SpecError, match="at most ceil"):
        read_trace(p)  # 3 ids for 600 tokens is too many at 512 tokens a block
    assert read_trace(p, block_size=256).blocks == ((1, 2, 3),)


def test_cli_malformed_trace_is_one_line_exit_2(tmp_path, capsys):
    from rackplan.cli import main

    trace = write(tmp_path, "t.csv", "Timestamp,Model,Request tokens,Response tokens\n"
                                     "5,ChatGPT,472,18\n9,GPT-4,4,many\n")
    wl = write(tmp_path, "w.yaml", f"name: w\narrival: {{kind: trace}}\nisl: {{kind: trace}}\nosl: {{kind: trace}}\n"
                                   f"trace: {trace}\n")
    assert main(["simulate", "--plan", "tiny-cpu", "--workload", str(wl)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{trace}:3" in err and "'Response tokens'" in err, err
