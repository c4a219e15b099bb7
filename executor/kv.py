"""KV-cache hand-off between a prefill instance and a decode instance: point-to-point send/recv
(gloo on CPU, NCCL on GPU) over one process group per (prefill rank, decode rank) pair, so each
pair's messages stay in order on NCCL too and a slow pair never blocks another.

A prompt's KV is [layers, isl, D] in the cache dtype. Every TP rank t' of the decode DP rank needs
what its heads read: the whole MLA latent (replicated over TP ranks), or its own GQA heads when
the two instances have the same TP size; it receives from TP rank t' mod tp_prefill of the
prefill DP rank (`source_rank`), which sends to every decode TP rank it serves (`dest_ranks`).
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from rackplan.specs import SpecError


class KVLinks:
    """The pair groups of every prefill rank with every decode rank (all ranks must build it)."""

    def __init__(self, instances, rank: int):
        self.rank = rank
        self.groups: dict[tuple[int, int], object] = {}
        pre = [r for inst in instances if inst.role == "prefill" for r in inst.ranks]
        dec = [r for inst in instances if inst.role == "decode" for r in inst.ranks]
        for s in pre:
            for d in dec:
                g = dist.new_group([s, d])
                if rank in (s, d):
                    self.groups[(s, d)] = g

    def send(self, kv: torch.Tensor, dst: int, tag: int):
        """Start sending kv [layers, L, D] to decode rank `dst`; returns the pending work."""
        return dist.isend(kv.contiguous(), dst, group=self.groups[(self.rank, dst)], tag=tag)

    def recv(self, shape: tuple, dtype, device, src: int, tag: int) -> tuple[torch.Tensor, float]:
        """Receive one prompt's KV from prefill rank `src`: (kv, seconds the receive took)."""
        out = torch.empty(shape, dtype=dtype, device=device)
        t0 = time.perf_counter()
        dist.recv(out, src, group=self.groups[(src, self.rank)], tag=tag)
        if out.is_cuda:
            torch.cuda.synchronize()
        return out, time.perf_counter() - t0


def check_kv_layouts(plan_name: str, spec, pre, dec) -> None:
    """GQA caches are head-sharded: they move between instances of the same TP size only."""
    if spec.attention.kind == "gqa" and pre.tp != dec.tp:
        raise SpecError(plan_name, "decode.tp", f"the prefill TP size ({pre.tp}) for a GQA model (no KV "
                        "resharding between TP sizes)", dec.tp)


def source_rank(pre_inst, dp: int, tp_rank: int) -> int:
    """World rank of the prefill rank that sends decode TP rank `tp_rank` a prompt of prefill DP rank `dp`."""
    tp = pre_inst.layout.tp
    return pre_inst.first + dp * tp + tp_rank % tp


def dest_ranks(pre_tp: int, tp_rank: int, dec_inst, dp: int) -> list[int]:
    """Decode world ranks (of decode DP rank `dp`) that prefill TP rank `tp_rank` sends to."""
    tp = dec_inst.layout.tp
    return [dec_inst.first + dp * tp + t for t in range(tp) if t % pre_tp == tp_rank]
