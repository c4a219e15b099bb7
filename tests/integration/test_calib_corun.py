"""calibration/corun.py's neighbour as a real spawned process: it runs the phase it is told, counts its steps,
and stops."""
import time

import pytest

from rackplan.calibration.corun import Neighbour, Shapes, free_core


@pytest.mark.integration
def test_the_neighbour_runs_the_phase_it_is_told_and_stops():
    core = free_core()
    if core is None:
        pytest.skip("one core: no neighbour")
    with Neighbour("tiny-moe", core, Shapes((8, 8), 2, 8)) as nb:
        assert nb.steps == {"prefill": 0, "decode": 0}  # idle until told
        nb.run("decode")
        while nb.steps["decode"] < 2:
            assert nb.alive  # a neighbour that died never counts: fail, not hang
            time.sleep(0.01)
        assert nb.steps["prefill"] == 0
        nb.run("prefill")
        while nb.steps["prefill"] < 2:
            assert nb.alive  # a neighbour that died never counts: fail, not hang
            time.sleep(0.01)
        nb.idle()
    assert not nb.alive
