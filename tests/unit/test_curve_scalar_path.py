"""The curves' float fast path (efficiency._one_scalar) gives the bits of the general path, curve by
curve of every shipped profile, in and out of each curve's ranges: the simulator's byte-identical outputs rest
on it (benchmarks/RESULTS.md, session 16 simspeed)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from rackplan.sim.cost import efficiency
from rackplan.specs import load_profile

pytestmark = pytest.mark.unit
PROFILES = ("gb300-nvl72-vllm", "gb200-nvl72-vllm", "h100-sxm-vllm", "h200-sxm-vllm", "b200-vllm",
            "gb200-nvl72-trtllm", "h800-deepep")
XS = (0.0, 0.5, 1.0, 7.0, 63.0, 64.0, 100.0, 1000.0, 3.3e4, 1e6)  # rows, contexts, bytes: around the ranges' bounds
YZ = ((0.0, 0.0), (576.0, 7168.0), (4096.0, 2048.0), (2.1e7, 3.4e5))
WORK_LOAD = ((0.0, 0.0), (1e6, 4.0), (3e12, 300.0))


def _curves():
    for name in PROFILES:
        for key, cs in load_profile(name).curves.items():
            for c in cs:
                yield f"{name}:{key}", c


@pytest.mark.parametrize("label,c", list(_curves()))
def test_float_path_gives_the_general_paths_bits(label, c):
    """np.float64 is a float subclass: it takes the general scalar path (the code before the fast path);
    a plain float takes the fast one. Equal results, == on the floats, for every shape of the grid."""
    sms = 132
    for (y, z), x, (work, load) in itertools.product(YZ, XS, WORK_LOAD):
        fixed = efficiency._fixed_terms(c, y, z, sms)
        fast = efficiency._one(c, fixed, x, work, load)
        general = efficiency._one(c, fixed, np.float64(x), np.float64(work), np.float64(load))
        assert fast.__class__ is float or fast == 0.0
        assert fast == general, (label, x, y, z, work, load)

