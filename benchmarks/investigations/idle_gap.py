"""Prefill step time after an idle gap vs back to back, on one pinned CPU core (tiny-moe, 56 tokens).

A lightly loaded prefill instance steps once per arrival; between steps its caches (and, on a VM,
its vCPU) go cold. This prints the median step at each gap side by side, so the calibration
sweep's `--step-gap` can be judged. Usage: python benchmarks/investigations/idle_gap.py [--core 1] [--steps 15]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from rackplan.executor.model import Batch, Model, layer_ids
from rackplan.executor.parallel import make_ep_group
from rackplan.executor.timing import NullTimer
from rackplan.specs import load_model

GAPS_S = (0.0, 0.02, 0.125, 0.0, 0.125)  # interleaved, so a drift of the machine shows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    spec = load_model("tiny-moe")
    model = Model(spec, 0, "cpu", torch.float32, make_ep_group(None, 0, 1, spec.moe.num_experts),
                  layer_ids(spec, "prefill"))
    cache = model.kv_cache(8, 128)
    toks = torch.randint(0, spec.vocab_size, (56,), generator=torch.Generator().manual_seed(0))

    def step() -> float:
        t0 = time.perf_counter()
        model.forward(Batch.prefill(toks, [56], torch.tensor([0])), cache, NullTimer())
        return time.perf_counter() - t0

    for _ in range(5):
        step()
    base = None
    for gap in GAPS_S:
        times = []
        for _ in range(args.steps):
            time.sleep(gap)
            times.append(step())
        med = float(np.median(times))
        base = med if gap == 0.0 and base is None else base
        print(f"idle gap {gap * 1e3:5.0f} ms: median step {med * 1e3:6.2f} ms  ({med / base:.2f}x back to back)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
