"""calibration/corun.py: the sweep's co-running neighbour, its shapes and its phase switching."""
import pytest

from rackplan.calibration.corun import PREFILL_PROMPTS, Shapes, neighbour_shapes, other_phase


@pytest.mark.unit
def test_the_neighbours_shapes_are_the_other_phases_typical_step():
    # tiny-chat: isl uniform 16..96 (mean 56), osl uniform 4..24 (mean 14); a decode batch cap of 32
    s = neighbour_shapes(56.0, 14.0, 32)
    assert s == Shapes((56, 56, 56), 32, 56 + 7) and len(s.prefill_lens) == PREFILL_PROMPTS
    assert neighbour_shapes(0.2, 0.0, 0) == Shapes((1,) * PREFILL_PROMPTS, 1, 1)  # never an empty step


@pytest.mark.unit
def test_a_decode_point_runs_beside_prefill_and_a_prefill_point_beside_decode():
    assert other_phase("decode-b32") == "prefill" and other_phase("prefill-t512") == "decode"
