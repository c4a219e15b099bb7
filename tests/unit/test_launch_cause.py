"""Which rank a failed run names: the cause, not the peer the parent happened to notice first."""
import pytest

from rackplan.executor import launch

pytestmark = pytest.mark.unit


def _err(tmp, rank, stamp, msg):
    (tmp / f"rank{rank}.err").write_text(f"{stamp} {msg}")


def test_the_earliest_stamped_error_is_named_not_the_rank_noticed(tmp_path):
    # rank 1 raised first; rank 0's gloo collective then saw its socket close, and the parent saw rank 0 exit
    _err(tmp_path, 1, 1_000, "RuntimeError: injected fault")
    _err(tmp_path, 0, 2_000, "RuntimeError: Connection reset by peer")
    assert launch._cause(0, 1, {}, 2, str(tmp_path)) == (1, 1)
    assert launch._reason(1, 1, str(tmp_path)) == "RuntimeError: injected fault"


def test_a_rank_killed_by_a_signal_is_named_before_stamped_errors(tmp_path):
    _err(tmp_path, 0, 2_000, "RuntimeError: Connection reset by peer")
    assert launch._cause(1, -9, {}, 2, str(tmp_path)) == (1, -9)
    assert launch._reason(1, -9, str(tmp_path)) == "killed by SIGKILL"


def test_no_error_file_names_the_rank_noticed(tmp_path):
    assert launch._cause(2, 1, {}, 4, str(tmp_path)) == (2, 1)
    assert launch._reason(2, 1, str(tmp_path)) == "exit code 1"
