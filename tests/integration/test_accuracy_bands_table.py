"""The shipped error bands (rackplan/data/accuracy_bands.yaml) are what the accuracy benchmark computes
now: a cost-model or case change that moves them must regenerate the table
(`python benchmarks/accuracy.py --write-bands`)."""

import pytest
import yaml

from rackplan.accuracy import command as accuracy
from rackplan.accuracy_band import BANDS_PATH

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.profile_data]


def test_shipped_bands_match_the_benchmark(tmp_path, capsys):
    out = tmp_path / "bands.yaml"
    assert accuracy.main(["--json", "--write-bands", str(out)]) == 0
    capsys.readouterr()
    fresh, shipped = yaml.safe_load(out.read_text()), yaml.safe_load(BANDS_PATH.read_text())
    assert fresh["command"] == shipped["command"]
    assert fresh["bands"] == shipped["bands"], "regenerate: python benchmarks/accuracy.py --write-bands"
