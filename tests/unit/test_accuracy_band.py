"""The error band lookup (rackplan/accuracy_band.py): hardware x phase, fallbacks, what is not covered.
Entries are built by hand here, so each expected line is read off the table above it."""
import dataclasses

import pytest

from rackplan.accuracy_band import ALL, Entry, band, headline_band, load_table
from rackplan.specs import load_plan, load_workload

pytestmark = pytest.mark.unit

E = [Entry("p", "gb300", "decode", 9, 0.12, 0.5, 0, ("deepseek-v3",), (128.0, 512.0)),
     Entry("p", "gb300", "prefill", 3, 0.30, 1.0, 1, ("deepseek-v3",)),
     Entry("p", "gb300", ALL, 12, 0.20, 0.6, 1, ("deepseek-v3", "qwen3"), (128.0, 512.0)),
     Entry("p", "h200", "prefill", 2, 0.05, 0.5, 0, ("deepseek-v3",)),
     Entry("p", "h200", ALL, 2, 0.05, 0.5, 0, ("deepseek-v3",)),
     Entry("p", ALL, "decode", 9, 0.12, 0.5, 0, ("deepseek-v3",), (128.0, 512.0)),
     Entry("p", ALL, ALL, 14, 0.15, 0.6, 1, ("deepseek-v3", "qwen3"), (128.0, 512.0))]


def test_hardware_and_phase_with_figures():
    b = band("p", "gb300", "decode", "deepseek-v3", 256, entries=tuple(E))
    assert (b.typical_error, b.figures, b.uncovered) == (0.12, 9, ())
    assert b.line() == "typical error 12% (9 published figures, decode, gb300)"


def test_a_phase_without_figures_falls_back_to_all_phases_on_the_hardware():
    b = band("p", "h200", "decode", "deepseek-v3", entries=tuple(E))
    assert (b.typical_error, b.figures, b.scope) == (0.05, 2, "all phases, h200")
    assert b.uncovered == ("no published decode figure on h200",)


def test_hardware_without_figures_falls_back_to_the_phase_on_all_hardware():
    b = band("p", "b200", "decode", "deepseek-v3", 256, entries=tuple(E))
    assert (b.typical_error, b.scope) == (0.12, "decode, all hardware")
    assert b.uncovered == ("no published figure on b200",)


def test_model_batch_and_speculation_outside_the_benchmark():
    b = band("p", "gb300", "decode", "deepseek-v4.1-flash", 1024, speculation=True, entries=tuple(E))
    assert b.typical_error == 0.12
    assert b.uncovered == ("no published figure of deepseek-v4.1-flash on gb300",
                           "1024 sequences per rank, published figures span 128-512",
                           "speculative decoding (no published figure with it is expressible)")


def test_a_profile_the_benchmark_never_ran():
    b = band("mine", "gb300", "decode", entries=tuple(E))
    assert b.typical_error is None and b.figures == 0
    assert b.line() == "typical error unknown; outside the benchmark: profile mine priced no published figure"


def test_headline_band_of_a_plan_reads_its_phase_and_batch():
    plan = load_plan("v41-flash-gb300-single-user")
    one = headline_band(plan, "gb300-nvl72-vllm", load_workload("single-user"))
    assert (one.phase, one.hardware) == ("single-user", "gb300-nvl72")
    assert any("speculative" in u for u in one.uncovered)  # DSpark in the plan, none in the benchmark
    many = headline_band(dataclasses.replace(plan, predicted={"est_batch_per_rank": 3.0}), "gb300-nvl72-vllm",
                         load_workload("agentic-chat"))
    assert many.phase == "decode"


def test_the_shipped_table_says_where_it_came_from():
    head, entries = load_table()
    assert head["command"].startswith("python benchmarks/accuracy.py --write-bands")
    assert len(head["commit"].split()[0]) == 40 and head["date"][:4].isdigit()
    assert entries and all(e.figures > 0 and e.typical_error >= 0 for e in entries)
    assert {(e.hardware, e.phase) for e in entries if e.profile == "datasheet"} >= {(ALL, ALL)}
