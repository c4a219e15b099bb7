"""Local launcher: one process per rank (fork on CPU, spawn on CUDA), a parent that watches them.

Ranks meet through a TCPStore the parent serves on a free loopback port (a private temp folder
holds the records and error files), with an explicit collective timeout.
The parent waits on the children's sentinels: the first rank to raise or die (a signal, e.g.
SIGKILL) fails the run at once, with a message naming the rank and the reason; the others are
terminated (SIGTERM, then SIGKILL) and joined, so no process outlives `execute`. A run that
exceeds its timeout is killed the same way, naming the ranks still running.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path

GRACE_S = 3.0  # SIGTERM -> SIGKILL


class RunFailed(RuntimeError):
    exit_code = 1


def _worker(cfg, rank: int, world: int, tmp: str, init: str) -> None:
    """Child process body: never returns (os._exit skips the parent's atexit handlers)."""
    code = 0
    try:
        import torch
        torch.set_num_threads(1)  # one core per rank on CPU
        if cfg.device == "cpu" and hasattr(os, "sched_setaffinity"):
            cores = sorted(os.sched_getaffinity(0))
            core = cfg.cores[rank] if cfg.cores else cores[rank % len(cores)]
            os.sched_setaffinity(0, {core})  # ranks stop migrating between cores
        if cfg.device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        from .parallel import init_distributed
        from .runner import run_rank
        init_distributed("nccl" if cfg.device == "cuda" else "gloo", rank, world, init, cfg.timeout_s)
        records = run_rank(cfg, rank, world)
        if rank == 0:
            Path(f"{tmp}/records.json").write_text(json.dumps(records))
        import torch.distributed as dist
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the run
        Path(f"{tmp}/rank{rank}.err").write_text(f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
        code = 1
    os._exit(code)


def launch(cfg, world: int) -> list[dict]:
    """Run `world` ranks; return rank 0's gathered records, or raise RunFailed naming the rank."""
    import torch.distributed as dist
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn" if cfg.device == "cuda" else "fork")
    tmp = tempfile.mkdtemp(prefix="rackplan-exec-")
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=cfg.timeout_s))
    procs = []
    try:
        for r in range(world):
            p = ctx.Process(target=_worker, args=(cfg, r, world, tmp, f"tcp://127.0.0.1:{server.port}"),
                            name=f"rackplan-rank{r}")
            p.start()
            procs.append(p)
        _watch(procs, cfg.timeout_s, tmp)
        return json.loads(Path(f"{tmp}/records.json").read_text())
    finally:
        _stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


def _watch(procs, timeout_s: float, tmp: str) -> None:
    deadline = time.monotonic() + timeout_s
    running = {p.sentinel: (r, p) for r, p in enumerate(procs)}
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            ranks = ", ".join(str(r) for r, _ in sorted(running.values(), key=lambda rp: rp[0]))
            raise RunFailed(f"timeout after {timeout_s:g} s: rank(s) {ranks} still running (killed)")
        for s in wait(list(running), timeout=left):
            r, p = running.pop(s)
            p.join()
            if p.exitcode != 0:
                raise RunFailed(f"rank {r} failed: {_reason(r, p.exitcode, tmp)}")


def _reason(rank: int, exitcode: int, tmp: str) -> str:
    err = Path(f"{tmp}/rank{rank}.err")
    if err.exists():
        return err.read_text()
    if exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def _stop(procs) -> None:
    """Terminate and reap every child still alive (SIGTERM, then SIGKILL after a grace)."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + GRACE_S
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
