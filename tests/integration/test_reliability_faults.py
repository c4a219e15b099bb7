"""Issue 18 faults: a killed `execute` parent leaves no rank and no temp folder; a stopped rank is
named within the collective timeout; an interrupted `plan --report` leaves no file."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _default_sigint() -> None:
    """The child takes Ctrl-C as a terminal's process does, even when this test runs where SIGINT is ignored
    and inherited so (a background job of a non-interactive shell: `.ci/run &`), which a process keeps."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _start_execute(tmp_path, *extra, steps=400):
    """An execute run in its own TMPDIR, returned once both ranks beat: (process, {rank: pid})."""
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", "tiny-cpu", "--steps", str(steps),
           "--out", str(tmp_path / "run"), *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        beats = {int(p.stem[4:]): p.read_text() for p in (tmp_path / "tmp").glob("rackplan-exec-*/rank*.hb")}
        if len(beats) == 2 and all(beats.values()):
            return proc, {r: int(pid) for r, pid in beats.items()}
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.kill()
    pytest.fail("ranks did not start")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGHUP])
def test_killed_parent_leaves_no_rank_and_no_temp_folder(tmp_path, sig):
    proc, ranks = _start_execute(tmp_path)
    others = _children(proc.pid)  # the ranks and the watchdog
    os.kill(proc.pid, sig)
    proc.communicate(timeout=30)
    pids = set(ranks.values()) | set(others)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids) and not list((tmp_path / "tmp").glob("rackplan-exec-*")):
            break
        time.sleep(0.1)
    assert not [p for p in ranks.values() if _alive(p)], "ranks outlived their parent"
    assert not list((tmp_path / "tmp").glob("rackplan-exec-*")), "temp folder left behind"
    assert not (tmp_path / "run" / "measurements.jsonl").exists()


def test_stopped_rank_is_named_within_the_collective_timeout(tmp_path):
    timeout_s = 18.0  # heartbeats go stale after 6 s
    proc, ranks = _start_execute(tmp_path, "--timeout", str(timeout_s))
    t0 = time.monotonic()
    os.kill(ranks[1], signal.SIGSTOP)
    try:
        _, err = proc.communicate(timeout=timeout_s + 20)
    finally:
        if _alive(ranks[1]):
            os.kill(ranks[1], signal.SIGKILL)
    took = time.monotonic() - t0
    assert proc.returncode == 1, err
    assert "rank(s) 1 stopped responding" in err, err
    assert took < timeout_s, f"named after {took:.1f} s"
    assert not _alive(ranks[0]) and not list((tmp_path / "tmp").glob("rackplan-exec-*"))


@pytest.mark.parametrize("when,sig,code", [("search", signal.SIGINT, 130), ("search", signal.SIGTERM, 143),
                                           ("writing", signal.SIGINT, 130)])
def test_interrupted_plan_report_leaves_no_file(tmp_path, when, sig, code):
    # no disk cache: a plan whose pricing an earlier run cached (priced/) starts no pool workers to interrupt
    env = dict(os.environ, RACKPLAN_CACHE_DIR="off")
    if when == "writing":
        env["RACKPLAN_TEST_INTERRUPT_WRITE"] = "1"  # Ctrl-C lands between two files of the output set
    cmd = [sys.executable, "-m", "rackplan.cli", "plan", "--model", "tiny-moe", "--hardware", "cpu-local",
           "--gpus", "4", "--workload", "tiny-chat", "--ttft-p90", "1s", "--tpot-p90", "200ms", "--workers", "2",
           "--quiet", "--out", str(tmp_path / "plan.yaml"), "--report", str(tmp_path / "report")]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=_default_sigint)
    if when == "search":  # Ctrl-C reaches the whole process group: parent and pool workers
        deadline = time.monotonic() + 60
        while len(_children(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == [], sorted(p.name for p in tmp_path.iterdir())
