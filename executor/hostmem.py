"""Host memory a CPU run's ranks need before any starts: each rank's weights at the model's real
shapes (sim/cost/memory.py's sizing), in the dtype the CPU ranks compute in (fp32 unless the
spec says fp16), over the layers the run builds (--max-dense-layers / --max-moe-layers)."""
from __future__ import annotations

import dataclasses
import os

from rackplan.sim.cost.memory import weight_bytes_per_rank
from rackplan.specs import ModelSpec, SpecError

DENSE_PARTS, MOE_PARTS = ("dense_ffn",), ("shared_experts", "routed_experts", "router")
NOT_BUILT = ("extra",)  # the executor builds no Engram tables (ModelSpec.extra_weight_bytes)


def cpu_weight_dtype(model: ModelSpec) -> str:
    """The spec's name of the dtype CPU ranks hold weights in (executor/attention.py's compute_dtype)."""
    from .attention import TORCH_DTYPES, compute_dtype
    return {d: n for n, d in TORCH_DTYPES.items()}[compute_dtype(model, "cpu")]


def rank_weight_bytes(model: ModelSpec, layout, max_dense: int | None, max_moe: int | None) -> float:
    """Bytes of weights one CPU rank of `layout` holds (a replayed rank holds one rank's share too)."""
    name = cpu_weight_dtype(model)
    dt = dataclasses.replace(model.dtypes, attention_weights=name, dense_weights=name, expert_weights=name)
    parts = weight_bytes_per_rank(dataclasses.replace(model, dtypes=dt), layout)
    dense, moe = model.layers_in("prefill" if layout.role == "prefill" else "decode")
    run_dense = dense if max_dense is None else min(dense, max_dense)
    run_moe = moe if max_moe is None else min(moe, max_moe)
    scale = {p: run_dense / max(dense, 1) for p in DENSE_PARTS} | {p: run_moe / max(moe, 1) for p in MOE_PARTS}
    scale["attention"] = (run_dense + run_moe) / max(dense + moe, 1)
    return sum(v * scale.get(p, 1.0) for p, v in parts.items() if p not in NOT_BUILT)


def physical_memory_bytes() -> float | None:
    """This machine's physical memory (os.sysconf), or None where the platform does not say."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _as_run(layout, world: int):
    """The layout as the CPU ranks build it: a replayed one (more ranks than `world`) holds its rank's
    num_experts / ep contiguous experts, without EPLB's redundant copies (executor/replay.py)."""
    if layout.gpus <= world:
        return layout
    return dataclasses.replace(layout, eplb=dataclasses.replace(layout.eplb, redundant_experts=0))


def check_host_memory(model: ModelSpec, insts, world: int, max_dense, max_moe) -> None:
    """SpecError naming --model when the ranks' weights exceed physical memory: such a run swaps
    until --timeout kills it. Every rank runs the instances one after another, so the run's peak is
    at least the largest instance's weights over the ranks that hold it (activations, KV cache and
    the interpreter come on top: a lower bound)."""
    have = physical_memory_bytes()
    if have is None or not insts:
        return
    need = max(min(world, i.layout.gpus) * rank_weight_bytes(model, _as_run(i.layout, world), max_dense, max_moe)
               for i in insts)
    if need > have:
        raise SpecError("execute", "--model", f"a model whose weights fit this machine's {have / 1e9:.1f} GB of "
                        f"memory (model {model.name} at its real shapes needs at least {need / 1e9:.1f} GB of "
                        f"{cpu_weight_dtype(model)} weights over {world} CPU ranks, analytic estimate); "
                        "e.g. --model tiny-moe", model.name)
