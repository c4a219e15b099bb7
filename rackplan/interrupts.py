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
        super().__init__(int(signum))  # args = (signum,): rebuilt as type(exc)(*exc.args), as SimPy does
        self.exit_code = 128 + int(signum)

    def __str__(self) -> str:
        return signal.Signals(self.args[0]).name


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


HELD = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


@contextmanager
def signals_held():
    """SIGINT / SIGTERM / SIGHUP held back (pending) while inside, e.g. while forking children that
    must not run the parent's handlers before they set their own."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def quiet_worker(parent_pid: int, init=None, *args) -> None:
    """Pool initializer (forked with signals held): die with the parent, ignore SIGINT (the parent
    handles Ctrl-C), default SIGTERM / SIGHUP, let signals in, then `init(*args)`."""
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child_defaults()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
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


def process_map(fn, tasks: list, workers: int, init=None, initargs: tuple = (), chunksize: int = 1):
    """Results of fn(task) in task order over a fork pool of quiet workers (a generator).

    On any exception in the parent (Ctrl-C, Terminated, an error) the pool is abandoned rather
    than terminated: Pool.terminate drains the task queue under a lock that a worker killed by a
    signal to the whole process group may hold, and then waits forever. Abandoning stops worker
    replacement, SIGKILLs the workers and cancels the pool's exit-time finalizer (CPython's Pool
    attributes, checked for), so an interrupted command exits at once and leaves no worker."""
    from multiprocessing import get_context

    pool = None
    try:
        with signals_held():  # workers and the pool's threads start with signals held; workers set their own
            pool = get_context("fork").Pool(workers, initializer=quiet_worker,
                                            initargs=(os.getpid(), init, *initargs))
        yield from pool.imap(fn, tasks, chunksize=chunksize)
    except BaseException:  # also GeneratorExit: the consumer stopped on its own exception
        if pool is not None:
            _abandon(pool)
        raise
    pool.close()
    pool.join()


@contextmanager
def in_background(fn, *args):
    """Run fn(*args) in one forked quiet worker while the caller goes on; yields a callable that waits for
    (and returns) its result. The worker is forked here, in the calling thread, before anything else runs
    beside it (a fork while another thread holds a lock, the import lock say, can leave the child waiting
    forever); on any exception the worker is abandoned as process_map's are."""
    from multiprocessing import get_context

    with signals_held():
        pool = get_context("fork").Pool(1, initializer=quiet_worker, initargs=(os.getpid(), None))
    try:
        yield pool.apply_async(fn, args).get
    except BaseException:
        _abandon(pool)
        raise
    pool.close()
    pool.join()


def _abandon(pool) -> None:
    handler = getattr(pool, "_worker_handler", None)
    if handler is not None:
        handler._state = "TERMINATE"  # multiprocessing.pool.TERMINATE: no replacement workers
    for proc in list(getattr(pool, "_pool", None) or []):
        try:
            proc.kill()
        except (OSError, ValueError):
            pass
    finalizer = getattr(pool, "_terminate", None)
    if finalizer is not None and hasattr(finalizer, "cancel"):
        finalizer.cancel()
    else:
        pool.terminate()
