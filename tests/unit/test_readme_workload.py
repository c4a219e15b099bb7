"""The README's workload table is the newcomer's only reference for writing a workload YAML: it names
every Workload field and every kind with the keys that kind reads (the README had none of them)."""
import dataclasses
import re
from pathlib import Path

import pytest

from rackplan.specs import Workload
from rackplan.specs.workload import ARRIVAL_KEYS, LENGTH_KEYS

pytestmark = pytest.mark.unit
README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
# fields documented beside the README's table (expert_load, classes)
DOCS = (Path(__file__).resolve().parents[2] / "docs" / "workloads.md").read_text()


def _table() -> dict[str, str]:
    """field cell -> the row, from the table under '### Workloads, traces and prefix caching'."""
    section = README.split("### Workloads, traces and prefix caching", 1)[1].split("\n\n| format |", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {row.split("|")[1]: row for row in rows}


def test_every_workload_field_is_in_the_readme_table():
    named = {f for cell in _table() for f in re.findall(r"`(\w+)`", cell)}
    cells = [line.split("|")[1] for line in DOCS.splitlines() if line.startswith("| `")]
    named |= {f for cell in cells for f in re.findall(r"`(\w+)`", cell)}
    assert {f.name for f in dataclasses.fields(Workload)} - {"name"} <= named


@pytest.mark.parametrize("field, keys", [("arrival", ARRIVAL_KEYS), ("isl", LENGTH_KEYS)])
def test_every_kind_and_its_keys_are_in_the_readme_table(field, keys):
    row = next(r for cell, r in _table().items() if f"`{field}`" in cell)
    for kind, reads in keys.items():
        assert f"`{kind}`" in row, kind
        for key in reads:
            assert f"`{key}`" in row, (kind, key)
