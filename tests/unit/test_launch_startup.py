"""A rank still starting (importing torch, setting its device) is not a hung rank until its startup
allowance runs out; once ready, its heartbeat is held to the stale limit."""
import os
import time

import pytest

from rackplan.executor.launch import _hung, stale_after_s, startup_after_s

pytestmark = pytest.mark.unit


def test_allowances_by_hand():
    assert stale_after_s(200) == 10.0 and startup_after_s(200) == 100.0
    assert stale_after_s(12) == 5.0 and startup_after_s(12) == 6.0
    assert startup_after_s(6) == 5.0  # never below the heartbeat's own limit


def test_hung_ranks(tmp_path):
    tmp = str(tmp_path)
    old = time.time() - 12  # a heartbeat 12 s old: stale at stale_s 10
    for r in (0, 1):
        (tmp_path / f"rank{r}.hb").write_text("1")
        os.utime(tmp_path / f"rank{r}.hb", (old, old))
    (tmp_path / "rank1.ready").touch()
    start = time.monotonic() - 30  # launched 30 s ago; rank 2 has not even written its heartbeat
    assert _hung([0, 1, 2], tmp, start, 10.0, 60.0) == [1]  # only the ready rank's silence counts
    assert _hung([0, 1, 2], tmp, time.monotonic() - 70, 10.0, 60.0) == [0, 1, 2]  # startup allowance spent
