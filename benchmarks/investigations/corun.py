"""Does a decode step run slower while a prefill rank runs its steps on the other core?

The calibration sweep measures one rank at a time; a disaggregated plan on cpu-local runs its prefill rank and
its decode rank at once, each pinned to its own core (executor/topology.cpu_cores). Served decode steps ran
+28..+64% over the sweep's at the same batch (session 17, loop). This script times one decode step of the
plan's shape (tiny-moe, every decode layer, `--batch` sequences at `--ctx` tokens of context, one intra-op
thread pinned to one core, as the executor runs it) in blocks of `--steps` steps, alternating two conditions
in a seeded order within each pair of blocks:

  alone   the neighbour on the other core idles, as a sweep point runs;
  corun   the neighbour (`--neighbour prefill`, the default: calibration/corun.Neighbour) runs prefill steps
          of `--prefill-tokens` tokens (prompts of 56 tokens, tiny-chat's mean) back to back on the other
          core, as a served plan's prefill rank does at its verified rate;
          `--neighbour spin`: an integer loop in L1 instead (shared core resources without memory traffic).

Per block: the median step wall time and the median step CPU time of the decode thread (time.thread_time:
a neighbour that takes the core away moves wall but not CPU time; one that slows memory moves both). The
ratio corun / alone per pair cancels the machine's drift over the run (adjacent blocks, seconds apart).

    python benchmarks/investigations/corun.py [--pairs 20] [--steps 20] [--batch 32] [--ctx 66] [--seed 0]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import time

from rackplan.calibration.corun import Neighbour, Shapes, pin

MEAN_PROMPT = 56  # tiny-chat: isl uniform 16..96


def spin(core: int, busy, stop, ready) -> None:
    """A neighbour that touches almost no memory (an integer loop in L1): what it takes from the decode step is
    the core's shared execution resources (SMT siblings under the VM), not cache or memory bandwidth."""
    pin(core)
    ready.set()
    while not stop.is_set():
        if not busy.wait(0.05):
            continue
        x = 0
        for i in range(200_000):
            x += i * i


class Spin:
    """`spin` in a spawned process, switched like calibration/corun.Neighbour."""

    def __init__(self, core: int):
        ctx = mp.get_context("spawn")
        self.busy, self.stop, ready = ctx.Event(), ctx.Event(), ctx.Event()
        self.proc = ctx.Process(target=spin, args=(core, self.busy, self.stop, ready), daemon=True)
        self.proc.start()
        ready.wait()

    def run(self, phase: str) -> None:
        self.busy.set()

    def idle(self) -> None:
        self.busy.clear()

    def close(self) -> None:
        self.stop.set()
        self.proc.join()


def decode_blocks(core: int, args, order: list[str], out) -> None:
    """Time `args.steps` decode steps per block, in `order`, after the parent switched the neighbour (a queue
    message per block: the parent holds the neighbour)."""
    import torch

    from rackplan.executor.model import Batch, Model, layer_ids
    from rackplan.executor.parallel import make_ep_group
    from rackplan.executor.timing import NullTimer
    from rackplan.specs import load_model
    pin(core)
    spec = load_model("tiny-moe")
    model = Model(spec, 0, "cpu", torch.float32, make_ep_group(None, 0, 1, spec.moe.num_experts),
                  layer_ids(spec, "decode"))
    cache = model.kv_cache(args.batch, args.ctx + 2)
    ctx = [args.ctx] * args.batch
    gen = torch.Generator().manual_seed(2)
    rows = []
    with torch.inference_mode():
        for i, cond in enumerate(order):
            out.put(("switch", cond))
            time.sleep(args.settle)
            walls, cpus = [], []
            for _ in range(args.warmup + args.steps):
                ids = torch.randint(0, spec.vocab_size, (args.batch,), generator=gen)  # [B]
                w0, c0 = time.perf_counter(), time.thread_time()
                model.forward(Batch.decode(ids, ctx), cache, NullTimer())
                walls.append(time.perf_counter() - w0)
                cpus.append(time.thread_time() - c0)
            rows.append((i // 2, cond, statistics.median(walls[args.warmup:]), statistics.median(cpus[args.warmup:])))
    out.put(("rows", rows))


def summarise(rows: list[tuple]) -> None:
    """Per condition the median of block medians; per pair corun / alone, its median and quartiles."""
    by = {c: [r for r in rows if r[1] == c] for c in ("alone", "corun")}
    for c, rs in by.items():
        print(f"{c:6s} blocks {len(rs):3d}  step wall median {1e3 * statistics.median(r[2] for r in rs):7.2f} ms  "
              f"cpu median {1e3 * statistics.median(r[3] for r in rs):7.2f} ms")
    pairs = {}
    for p, c, w, cpu in rows:
        pairs.setdefault(p, {})[c] = (w, cpu)
    for k, name in ((0, "wall"), (1, "cpu ")):
        ratios = sorted(v["corun"][k] / v["alone"][k] for v in pairs.values() if len(v) == 2)
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        print(f"corun / alone {name}: median {statistics.median(ratios):.3f}  quartiles {q[0]:.3f} .. {q[2]:.3f}  "
              f"min {ratios[0]:.3f} max {ratios[-1]:.3f}  pairs {len(ratios)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=20, help="timed decode steps per block")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="decode sequences (the plan's batch cap)")
    ap.add_argument("--ctx", type=int, default=66, help="context tokens per sequence (served median)")
    ap.add_argument("--prefill-tokens", type=int, default=168, help="the neighbour's prefill step (served median)")
    ap.add_argument("--settle", type=float, default=0.2, help="seconds after switching the neighbour")
    ap.add_argument("--neighbour", choices=("prefill", "spin"), default="prefill")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    order = [c for _ in range(args.pairs) for c in rng.sample(["alone", "corun"], 2)]
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0, 1]
    lens = (MEAN_PROMPT,) * max(1, args.prefill_tokens // MEAN_PROMPT)
    nb = (Neighbour("tiny-moe", cores[0], Shapes(lens, 1, 1)) if args.neighbour == "prefill" else Spin(cores[0]))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    dec = ctx.Process(target=decode_blocks, args=(cores[-1], args, order, out))
    dec.start()
    while True:  # the decode process asks for each block's condition; its rows end the run
        kind, val = out.get()
        if kind == "rows":
            rows = val
            break
        nb.run("prefill") if val == "corun" else nb.idle()
    dec.join()
    nb.close()
    what = f"prefill {len(lens)} x {MEAN_PROMPT} tokens" if args.neighbour == "prefill" else "an integer loop"
    print(f"decode b{args.batch} ctx {args.ctx} on core {cores[-1]}; neighbour {what} on core {cores[0]}; "
          f"{args.pairs} pairs x {args.steps} steps; load {os.getloadavg()[0]:.2f}")
    summarise(rows)


if __name__ == "__main__":
    main()
