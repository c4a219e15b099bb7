"""Every plan field is in docs/plan_fields.md with what runs it, backed by a test that exists; the
executor refuses the fields it does not run before any rank starts, naming them; ran.json says
what ran."""
from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from rackplan.executor.fields import check_plan_fields, check_replicas, plan_record
from rackplan.executor.serve import check_plan
from rackplan.specs import Plan, SpecError, from_dict, load_hardware, load_model, load_plan
from rackplan.specs.layout import SLO, EPLBConfig, Layout, Speculation

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "plan_fields.md"
NESTED = {"prefill": Layout, "decode": Layout, "aggregated": Layout, "slo": SLO, "speculation": Speculation,
          "eplb": EPLBConfig}


def _walk(cls, seen=None) -> list[str]:
    """'Class.field' of every field of `cls` and of the dataclasses its fields hold."""
    seen = set() if seen is None else seen
    out = []
    for f in dataclasses.fields(cls):
        out.append(f"{cls.__name__}.{f.name}")
        inner = NESTED.get(f.name)
        if inner is not None and inner not in seen:
            seen.add(inner)
            out += _walk(inner, seen)
    return out


def _rows() -> dict[str, list[str]]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        m = re.match(r"\| `([A-Za-z]+\.[a-z_0-9]+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


FIELDS = _walk(Plan)


def test_the_walk_covers_every_dataclass_the_plan_holds():
    hints = {c: typing.get_type_hints(c) for c in (Plan, Layout)}
    held = {n for c, h in hints.items() for n, t in h.items() if dataclasses.is_dataclass(typing.get_args(t)[0]
            if typing.get_args(t) else t)}
    assert held <= set(NESTED)
    assert set(_rows()) == set(FIELDS)  # no stale rows either


@pytest.mark.parametrize("field", FIELDS)
def test_every_plan_field_is_in_the_table(field):
    rows = _rows()
    assert field in rows, f"{field} is not in docs/plan_fields.md"
    sim, executor, test = rows[field]
    assert sim and executor
    path, func = test.split("::")
    assert re.search(rf"^def {func}\(", (ROOT / path).read_text(), re.M), f"{field}: {test} does not exist"
    if "refused" in executor:  # a refusal the tests below check
        assert field in {f"Layout.{next(iter(edit))}" for edit, *_ in REFUSED} | REFUSED_BY_MODE | REFUSED_PLAN


def _tiny(**lay) -> Plan:
    base = {"role": "decode", "dp": 1, "cuda_graphs": False}
    return from_dict(Plan, {"name": "t", "model": "tiny-moe", "hardware": "cpu-local", "num_gpus": 64,
                            "prefill": [{"role": "prefill", "dp": 1, "cuda_graphs": False}],
                            "decode": [dict(base, **lay)]})


REFUSED = [  # (layout edit, device, serving, field named)
    ({"pp": 2}, "cpu", False, "decode[0].pp"),
    ({"offload_gb": 1.0}, "cpu", True, "decode[0].offload_gb"),
    ({"moe_imbalance": 1.3}, "cpu", False, "decode[0].moe_imbalance"),
    ({"all2all": "allgather_reducescatter", "dp": 2}, "cpu", False, "decode[0].all2all"),
    ({"api_servers": 2}, "cpu", True, "decode[0].api_servers"),
    ({"stream_interval": 4}, "cpu", True, "decode[0].stream_interval"),
    ({"engine": "sglang"}, "cpu", False, "decode[0].engine"),
    ({"moe_backend": "deepgemm"}, "cpu", False, "decode[0].moe_backend"),
]
REFUSED_BY_MODE = {"Layout.tp", "Layout.speculation", "Layout.replicas"}
REFUSED_PLAN = {"Plan.prefill_hardware", "Plan.prefill_profile", "Plan.kv_link_bw"}  # mixed hardware (below)


@pytest.mark.parametrize("edit,field", [({"prefill_hardware": "h200-sxm"}, "prefill_hardware"),
                                        ({"prefill_hardware": "h200-sxm", "prefill_profile": "h200-sxm-vllm"},
                                         "prefill_hardware"),
                                        ({"kv_link_bw": 25e9}, "kv_link_bw")])
def test_mixed_hardware_fields_are_refused_naming_them(edit, field):
    """A prefill pool on other hardware (prefill_profile only comes with it) and a declared KV link are
    the simulator's (sim/mixed.py): the executor refuses them in any mode, naming the field."""
    for device, serving in (("cpu", False), ("cpu", True)):
        with pytest.raises(SpecError) as exc:
            check_plan_fields(dataclasses.replace(_tiny(), **edit), device, serving, "plan.yaml")
        assert exc.value.field == field


@pytest.mark.parametrize("edit,device,serving,field", REFUSED)
def test_refused_fields_are_refused_naming_them(edit, device, serving, field):
    with pytest.raises(SpecError) as exc:
        check_plan_fields(_tiny(**edit), device, serving, "plan.yaml")
    assert exc.value.field == field
    check_plan_fields(_tiny(), device, serving, "plan.yaml")  # the same plan without the edit runs


def test_serving_modes_refuse_what_they_do_not_run():
    colocated = dataclasses.replace(_tiny(tp=2), colocated=True)
    with pytest.raises(SpecError) as exc:
        check_plan(colocated, "plan.yaml")
    assert exc.value.field == "decode[0].tp"
    spec = {"num_tokens": 1, "acceptance_length": 1.5}
    with pytest.raises(SpecError) as exc:
        check_plan(dataclasses.replace(_tiny(speculation=spec), colocated=True), "plan.yaml")
    assert exc.value.field == "decode[0].speculation"
    with pytest.raises(SpecError) as exc:  # replicas are refused, never dropped
        check_replicas(_tiny(replicas=4), "plan.yaml", 4)
    assert exc.value.field == "decode[0].replicas"
    check_replicas(_tiny(replicas=3), "plan.yaml", 4)


def test_ran_record_says_what_ran():
    plan = load_plan("tiny-disagg")
    ran = plan_record(plan, "cpu", True)
    assert ran["mode"] == "disaggregated" and ran["router"] == plan.router
    assert ran["replicas"] == {"prefill[0]": 2, "decode[0]": 1}
    assert ran["decode[0]"]["cuda_graphs"] is False and ran["decode[0]"]["dbo"] is False
    assert plan_record(plan, "cpu", False)["mode"] == "benchmark"


def test_gpu_memory_utilization_sizes_the_executors_kv():
    """The executor's serving policy takes its KV blocks from the memory model the simulator uses,
    so gpu_memory_utilization moves them."""
    from rackplan.executor.serving import engines
    from rackplan.sim.deployment import validate_plan

    model, hw = load_model("tiny-moe"), load_hardware("cpu-local")
    got = []
    for gmu in (0.5, 0.9):
        plan = _tiny(gpu_memory_utilization=gmu)
        _, dec = engines(plan, model, hw, [8], [8], [0])
        assert dec.core.kv_blocks == int(validate_plan(plan, model, hw)["decode[0]"] // dec.core.block)
        got.append(dec.core.kv_blocks)
    assert got[0] < got[1]
