"""Run a function on N gloo ranks forked from the test process (FileStore rendezvous)."""
from __future__ import annotations

import os

import torch
import torch.multiprocessing as mp


def _entry(fn, rank, world, tmp, args):
    code = 0
    try:
        torch.set_num_threads(1)
        from rackplan.executor.parallel import init_distributed
        init_distributed("gloo", rank, world, os.path.join(tmp, "store"), 30.0)
        torch.save(fn(rank, world, *args), os.path.join(tmp, f"out{rank}.pt"))
    except BaseException as exc:  # noqa: BLE001
        print(f"rank {rank}: {exc!r}", flush=True)
        code = 1
    os._exit(code)


def run_ranks(fn, world: int, tmp: str, *args, timeout_s: float = 60.0) -> list:
    """fn(rank, world, *args) on each rank; returns their results in rank order."""
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_entry, args=(fn, r, world, str(tmp), args)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout_s)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return [torch.load(os.path.join(tmp, f"out{r}.pt")) for r in range(world)]
