"""A co-running rank for the calibration sweep: the other phase's steps on the other core.

A disaggregated plan on a CPU rig runs its prefill rank and its decode rank at once, each pinned to a core of
its own (executor/topology.cpu_cores); a sweep point runs one rank alone. On the 2-core dev VM a decode step
of the plan's shape takes 1.06-1.15x its alone CPU time while a prefill rank runs its steps on the other core
(`benchmarks/investigations/corun.py`, interleaved blocks; RESULTS.md session 18, loop): the two ranks share
the last-level cache and the memory bus. So the sweep measures each phase's shapes while the other phase's
steps run beside them, as they do when the plan serves: `Neighbour(model, core)` is a spawned process pinned
to `core` that runs, while told to, back-to-back steps of the other phase's typical shape.

The neighbour's shapes (`neighbour_shapes`): prefill steps of PREFILL_PROMPTS prompts of the workload's mean
prompt length (served prefill steps at 80-100% of a verified rate: median 164-211 tokens, 3-3.5 prompts, in
the lead's session 17 run 3), decode steps at the plan's decode batch cap over the mean prompt plus half the
mean output of context.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import dataclass

PREFILL_PROMPTS = 3  # prompts a served prefill step holds (median of 3-3.5 at 80-100% of the verified rate)


@dataclass(frozen=True)
class Shapes:
    """What the neighbour runs: `prefill_lens` [B] prompt tokens per prefill step; `decode_batch` sequences
    at `decode_ctx` tokens of context per decode step."""

    prefill_lens: tuple[int, ...]
    decode_batch: int
    decode_ctx: int


def neighbour_shapes(mean_isl: float, mean_osl: float, decode_batch: int) -> Shapes:
    """The other phase's typical step: PREFILL_PROMPTS prompts of the mean length; the decode batch cap at the
    mean prompt + half the mean output of context."""
    isl = max(1, round(mean_isl))
    return Shapes((isl,) * PREFILL_PROMPTS, max(1, decode_batch), isl + max(0, round(mean_osl / 2)))


def other_phase(label: str) -> str:
    """The phase a neighbour runs beside a sweep point labelled `decode-*` or `prefill-*`."""
    return "prefill" if label.startswith("decode") else "decode"


def pin(core: int) -> None:
    """One intra-op thread on `core`, as executor/launch.py pins a CPU rank."""
    import torch
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})


def _serve(model: str, core: int, shapes: Shapes, phase, counts, stop, ready) -> None:
    """The neighbour's loop: steps of `phase.value` ('p' prefill, 'd' decode, 'i' idle) until `stop`, each
    counted in `counts` [prefill steps, decode steps]."""
    import torch

    from rackplan.executor.model import Batch, Model, layer_ids
    from rackplan.executor.parallel import make_ep_group
    from rackplan.executor.timing import NullTimer
    from rackplan.specs import load_model
    pin(core)
    spec = load_model(model)
    ep = make_ep_group(None, 0, 1, spec.moe.num_experts) if spec.moe else None
    models = {p: Model(spec, 0, "cpu", torch.float32, ep, layer_ids(spec, p)) for p in ("prefill", "decode")}
    caches = {"prefill": models["prefill"].kv_cache(len(shapes.prefill_lens), max(shapes.prefill_lens) + 1),
              "decode": models["decode"].kv_cache(shapes.decode_batch, shapes.decode_ctx + 2)}
    gen = torch.Generator().manual_seed(0)
    ready.set()
    with torch.inference_mode():
        while not stop.wait(0.0):
            which = {b"p": "prefill", b"d": "decode"}.get(phase.value)
            if which is None:
                stop.wait(0.02)
                continue
            if which == "prefill":
                ids = torch.randint(0, spec.vocab_size, (sum(shapes.prefill_lens),), generator=gen)  # [T]
                batch = Batch.prefill(ids, list(shapes.prefill_lens))
            else:
                ids = torch.randint(0, spec.vocab_size, (shapes.decode_batch,), generator=gen)  # [B]
                batch = Batch.decode(ids, [shapes.decode_ctx] * shapes.decode_batch)
            models[which].forward(batch, caches[which], NullTimer())
            counts[which == "decode"] += 1


class Neighbour:
    """A spawned process on `core` running `model`'s steps of one phase while `run(phase)` holds, idle after
    `idle()`; a context manager (the process stops on exit)."""

    def __init__(self, model: str, core: int, shapes: Shapes):
        ctx = mp.get_context("spawn")
        self._phase = ctx.Value("c", b"i", lock=False)
        self._counts = ctx.Array("q", 2, lock=False)  # [prefill steps, decode steps] run so far
        self._stop, ready = ctx.Event(), ctx.Event()
        self._proc = ctx.Process(target=_serve, args=(model, core, shapes, self._phase, self._counts, self._stop,
                                                      ready),
                                 name="rackplan-corun", daemon=True)
        self._proc.start()
        ready.wait()

    def run(self, phase: str) -> None:
        """Run steps of `phase` ('prefill' or 'decode') from now on."""
        self._phase.value = {"prefill": b"p", "decode": b"d"}[phase]

    def idle(self) -> None:
        """Stop after the step in flight."""
        self._phase.value = b"i"

    @property
    def steps(self) -> dict[str, int]:
        """Steps run so far per phase."""
        return {"prefill": int(self._counts[0]), "decode": int(self._counts[1])}

    @property
    def alive(self) -> bool:
        return self._proc.is_alive()

    def close(self) -> None:
        self._stop.set()
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()

    def __enter__(self) -> "Neighbour":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def free_core(rank_core_index: int = 0) -> int | None:
    """A core of this process's affinity other than the sweep rank's (the launcher pins a lone rank to the
    first, `rank_core_index` 0); None on a one-core machine (no neighbour to run)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    rest = [c for i, c in enumerate(cores) if i != rank_core_index]
    return rest[-1] if rest else None
