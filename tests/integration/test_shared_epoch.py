"""Every rank of a disaggregated run counts its clock from one instant (executor.disagg.shared_epoch),
even when the ranks leave the start barrier at different times."""
from __future__ import annotations

import time

import pytest
import torch.distributed as dist

from .exec_harness import run_ranks

pytestmark = pytest.mark.integration

LATE_S = 0.5  # rank 1 starts its clock this much after rank 0 (well above a loaded machine's barrier skew)


def _clocks(rank, world):
    from rackplan.executor.disagg import shared_epoch

    dist.barrier()
    if rank == 1:
        time.sleep(LATE_S)
    t0_own = time.perf_counter()  # the origin each rank took before: its own exit from the start
    t0_shared = shared_epoch()
    dist.barrier()  # one instant for both ranks (to the barrier's skew)
    now = time.perf_counter()
    return now - t0_shared, now - t0_own


def test_ranks_read_one_clock_after_a_late_start(tmp_path):
    """Rank 1 starts 0.5 s late: its own perf_counter origin would read 0.5 s less than rank 0's at the
    same instant; the shared epoch reads the same (within the barrier's skew: a few ms idle, allowed
    0.15 s on a loaded machine)."""
    (shared0, own0), (shared1, own1) = run_ranks(_clocks, 2, tmp_path)
    assert own0 - own1 > LATE_S * 0.8  # what per-rank origins would record
    assert abs(shared0 - shared1) < 0.15, (shared0, shared1)
