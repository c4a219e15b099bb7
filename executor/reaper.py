"""Watchdog of one `execute` run: if the parent dies without saying so, kill its ranks, remove its temp folder.

`launch` starts this as a separate small process (python -m rackplan.executor.reaper TMP) and
writes each rank's pid to its stdin. When the parent ends normally it writes "done"; when it dies
any other way (SIGKILL, a crash) its end of the pipe closes, this process reads EOF, sends SIGKILL
to every rank still alive (they also die by their parent-death signal) and removes the temp folder.
It ignores SIGINT / SIGTERM / SIGHUP so that a signal to the whole process group cannot stop the
cleanup; it always ends with its parent.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys


def main(tmp: str) -> int:
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    pids = []
    for line in sys.stdin:
        word = line.strip()
        if word == "done":
            return 0
        if word.isdigit():
            pids.append(int(word))
    for pid in pids:  # the parent died: nothing else will stop them
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
