"""Signals: how a command stops cleanly, and how the processes it starts stop with it.

- The command (cli.main) turns SIGTERM and SIGHUP into `Terminated`, a KeyboardInterrupt, so every
  `finally` runs (temp folders removed, ranks and pool workers stopped) and it exits 128 + signal.
- Pool workers (planner, what-if) ignore SIGINT: Ctrl-C reaches the whole process group, and only
  the parent should react (it terminates the pool quietly), never each worker with a traceback.
- A child can ask the kernel to kill it when its parent dies (`die_with_parent`, Linux prctl).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP received: unwinds like Ctrl-C; `exit_code` is 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


def _raise(signum, _frame):
    raise Terminated(signum)


@contextmanager
def terminate_cleanly():
    """While inside: SIGTERM / SIGHUP raise Terminated in the main thread (previous handlers restored)."""
    sigs = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    try:
        old = {s: signal.signal(s, _raise) for s in sigs}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def child_defaults() -> None:
    """In a forked child: the default SIGTERM / SIGHUP actions (not the parent's Terminated)."""
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


def quiet_worker(init=None, *args) -> None:
    """Pool initializer: ignore SIGINT (the parent handles Ctrl-C), default SIGTERM, then `init(*args)`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child_defaults()
    if init is not None:
        init(*args)


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux); if the parent is
    already gone (it died before the call), exit now."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(1)
