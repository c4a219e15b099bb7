"""Local launcher: one process per rank (fork on CPU, spawn on CUDA), a parent that watches them.

Ranks meet through a TCPStore the parent serves on a free loopback port (a private temp folder
holds the records, error and heartbeat files), with an explicit collective timeout.
The parent waits on the children's sentinels: the first rank to raise or die (a signal, e.g.
SIGKILL) fails the run at once, with a message naming the rank and the reason (the rank that caused
it: a rank killed by a signal, else the earliest time-stamped error, not a peer whose collective saw
that rank's sockets close and which the parent happened to notice first); the others are
terminated (SIGTERM, then SIGKILL) and joined, so no process outlives `execute`. A rank whose
heartbeat (a file it touches every HEARTBEAT_S from a thread) goes stale - stopped (SIGSTOP),
swapped out, deadlocked in C - is named and the run fails well inside the collective timeout; a rank
still starting (a spawned rank imports torch before any of our code runs) has startup_after_s.
A run that exceeds its timeout is killed the same way, naming the ranks still running.

Every exit path cleans up: the parent's `finally` stops the ranks and removes the temp folder
(SIGTERM / SIGHUP unwind to it, rackplan/interrupts.py); each rank asks the kernel to SIGKILL it
when the parent dies; and a watchdog process (reaper.py) removes the temp folder and kills the
ranks if the parent is killed outright (SIGKILL).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path

from rackplan.interrupts import HELD, child_defaults, die_with_parent, signals_held

GRACE_S = 3.0  # SIGTERM -> SIGKILL
HEARTBEAT_S = 0.25  # a rank touches its heartbeat file this often


def stale_after_s(timeout_s: float) -> float:
    """Seconds without a heartbeat after which a rank counts as hung: well inside the collective
    timeout, never so short that a loaded machine's scheduling jitter trips it."""
    return max(5.0, min(10.0, timeout_s / 3))


def startup_after_s(timeout_s: float) -> float:
    """Seconds a rank has to become ready (its heartbeat running, torch imported, its device set)
    before its silence counts as a hang: a spawned rank imports torch (and CUDA's libraries) while
    unpickling its arguments, before any code of ours runs, which takes well over stale_after_s on a
    cold machine. Half the run's timeout, never less than the heartbeat's own limit."""
    return max(stale_after_s(timeout_s), timeout_s / 2)


class RunFailed(RuntimeError):
    exit_code = 1


def _heartbeat(path: str) -> None:
    """Touch `path` (holding this pid) every HEARTBEAT_S until the process ends (a daemon thread)."""
    Path(path).write_text(str(os.getpid()))

    def beat():
        while True:
            time.sleep(HEARTBEAT_S)
            try:
                os.utime(path)
            except OSError:
                return

    threading.Thread(target=beat, name="rackplan-heartbeat", daemon=True).start()


def pin_rank(cfg, rank: int | None, local_rank: int) -> None:
    """Threads, cores and device of one rank. CPU: the plan's hardware's threads_per_rank intra-op
    threads (1 unless a CPU rig's spec says more) on as many cores, from the core the run assigned to
    global `rank` (cfg.cores, serving mode on one host), else from this host's cores round-robin by
    `local_rank` (rank None: a multi-host torchrun, whose cfg.cores, sized on one host, do not apply).
    CUDA: one thread, the local GPU `local_rank`."""
    import torch
    threads = 1
    if cfg.device == "cpu":
        from rackplan.specs import load_hardware, load_plan
        hw = load_hardware(load_plan(cfg.plan).hardware)
        threads = hw.threads_per_rank if hw.kind == "cpu" else 1
    torch.set_num_threads(threads)
    if cfg.device == "cpu" and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        first = cores.index(cfg.cores[rank]) if cfg.cores and rank is not None else local_rank * threads
        os.sched_setaffinity(0, {cores[(first + i) % len(cores)] for i in range(threads)})  # no migrating
    if cfg.device == "cuda":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())


def _worker(cfg, rank: int, world: int, tmp: str, init: str, parent: int) -> None:
    """Child process body: never returns (os._exit skips the parent's atexit handlers)."""
    code = 0
    child_defaults()  # SIGTERM kills a rank; it is not the parent's clean unwind
    die_with_parent(parent)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)  # started with them held (launch)
    try:
        _heartbeat(f"{tmp}/rank{rank}.hb")
        pin_rank(cfg, rank, rank)
        Path(f"{tmp}/rank{rank}.ready").touch()  # from here on its heartbeat is held to stale_after_s
        from .parallel import init_distributed
        from .runner import run_rank
        with _rendezvous(cfg.timeout_s, f"{tmp}/rank{rank}.log"):
            init_distributed("nccl" if cfg.device == "cuda" else "gloo", rank, world, init, cfg.timeout_s)
        records = run_rank(cfg, rank, world)
        if rank == 0:
            Path(f"{tmp}/records.json").write_text(json.dumps(records))
        import torch.distributed as dist
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the run
        _write_error(tmp, rank, exc)
        code = 1
    os._exit(code)


def _write_error(tmp: str, rank: int, exc: BaseException) -> None:
    """The rank's error, stamped with the system-wide monotonic clock: when one rank fails, its peers
    fail too (their collectives see its sockets close), and the parent may notice a peer first."""
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    Path(f"{tmp}/rank{rank}.err").write_text(f"{time.monotonic_ns()} {msg}")


def launch(cfg, world: int) -> list[dict]:
    """Run `world` ranks; return rank 0's gathered records, or raise RunFailed naming the rank."""
    import torch.distributed as dist
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn" if cfg.device == "cuda" else "fork")
    tmp = tempfile.mkdtemp(prefix="rackplan-exec-")
    procs, reaper = [], None
    try:
        reaper = subprocess.Popen([sys.executable, "-m", "rackplan.executor.reaper", tmp], stdin=subprocess.PIPE,
                                  text=True, start_new_session=True)
        with _rendezvous(cfg.timeout_s, f"{tmp}/store.log"):
            server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=cfg.timeout_s))
        for r in range(world):
            p = ctx.Process(target=_worker, args=(cfg, r, world, tmp, f"tcp://127.0.0.1:{server.port}", os.getpid()),
                            name=f"rackplan-rank{r}")
            with signals_held():  # the rank sets its own handlers before it takes a signal
                p.start()
            procs.append(p)
            reaper.stdin.write(f"{p.pid}\n")
            reaper.stdin.flush()
        _watch(procs, cfg.timeout_s, tmp)
        return json.loads(Path(f"{tmp}/records.json").read_text())
    finally:
        _stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)
        _release(reaper)


@contextmanager
def _rendezvous(timeout_s: float, log: str):
    """Set up the ranks' store / process group within --timeout: c10d's own error log (a C++
    backtrace of ~30 lines, written to fd 2) goes to `log`, and a failure is RunFailed in one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log, "ab") as fh:
            os.dup2(fh.fileno(), 2)
        yield
    except RuntimeError as exc:  # torch.distributed.DistError and its kind
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RunFailed(f"--timeout {timeout_s:g} s: the ranks' rendezvous (c10d store on 127.0.0.1) did not "
                        f"complete in time ({first}); give a longer --timeout") from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _release(reaper) -> None:
    """Tell the watchdog the parent cleaned up itself, and reap it."""
    if reaper is None:
        return
    try:
        reaper.stdin.write("done\n")
        reaper.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass
    try:
        reaper.wait(timeout=5)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


def _watch(procs, timeout_s: float, tmp: str) -> None:
    start = time.monotonic()
    deadline, stale_s, startup_s = start + timeout_s, stale_after_s(timeout_s), startup_after_s(timeout_s)
    running = {p.sentinel: (r, p) for r, p in enumerate(procs)}
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            ranks = ", ".join(str(r) for r, _ in sorted(running.values(), key=lambda rp: rp[0]))
            raise RunFailed(f"--timeout {timeout_s:g} s passed: rank(s) {ranks} still running (killed)")
        for s in wait(list(running), timeout=min(left, HEARTBEAT_S)):
            r, p = running.pop(s)
            p.join()
            if p.exitcode != 0:
                r, code = _cause(r, p.exitcode, running, len(procs), tmp)
                raise RunFailed(f"rank {r} failed: {_reason(r, code, tmp)}")
        hung = _hung(sorted(r for r, _ in running.values()), tmp, start, stale_s, startup_s)
        if hung:
            raise RunFailed(f"rank(s) {', '.join(map(str, hung))} stopped responding: no heartbeat for "
                            f"{stale_s:g} s (stopped, hung or starved; collective timeout {timeout_s:g} s) (killed)")


def _cause(rank: int, exitcode: int, running: dict, world: int, tmp: str) -> tuple[int, int]:
    """(rank, exit code) of the failure that caused the others: a rank killed by a signal, else the
    rank whose error was stamped first; `rank` (the one the parent noticed) when neither tells."""
    failed = {rank: exitcode}
    for s in wait(list(running), timeout=0):  # ranks already gone
        r, p = running[s]
        p.join()
        if p.exitcode != 0:
            failed[r] = p.exitcode
    killed = sorted(r for r, code in failed.items() if code < 0)
    if killed:
        return killed[0], failed[killed[0]]
    stamps = {r: t for r in range(world) if (t := _error(r, tmp)[0]) is not None}
    if not stamps:
        return rank, exitcode
    first = min(stamps, key=lambda r: (stamps[r], r))
    return first, failed.get(first, 1)


def _error(rank: int, tmp: str) -> tuple[int | None, str | None]:
    """(monotonic stamp in ns, message) of a rank's error file; (None, None) when it wrote none."""
    try:
        stamp, _, msg = Path(f"{tmp}/rank{rank}.err").read_text().partition(" ")
        return int(stamp), msg
    except (FileNotFoundError, ValueError):
        return None, None


def _hung(ranks: list[int], tmp: str, start: float, stale_s: float, startup_s: float) -> list[int]:
    """Ranks whose heartbeat file is older than `stale_s` once they are ready, or that are not ready
    (no `.ready` marker: still importing torch or setting up their device) `startup_s` after the launch."""
    now, wall_now = time.monotonic(), time.time()
    out = []
    for r in ranks:
        if not os.path.exists(f"{tmp}/rank{r}.ready"):
            if now - start > startup_s:
                out.append(r)
            continue
        try:
            age = wall_now - os.stat(f"{tmp}/rank{r}.hb").st_mtime
        except FileNotFoundError:
            age = now - start
        if age > stale_s:
            out.append(r)
    return out


def _reason(rank: int, exitcode: int, tmp: str) -> str:
    msg = _error(rank, tmp)[1]
    if msg is not None:
        return msg
    if exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def _stop(procs) -> None:
    """Terminate and reap every child still alive (SIGTERM, then SIGKILL after a grace)."""
    for p in procs:
        if p.is_alive():
            p.terminate()
            try:
                os.kill(p.pid, signal.SIGCONT)  # a stopped (SIGSTOP) rank takes its SIGTERM now
            except ProcessLookupError:
                pass
    end = time.monotonic() + GRACE_S
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
