"""Replay one rank of a plan bigger than the machine, at that rank's exact per-rank shapes.

A DEPn plan on W < n local devices: every local rank plays plan rank r (its own rank). Attention,
router, shared expert and LM head run on the rank's own batch, exactly as in the plan (DP
attention has no cross-rank dependency). For the routed experts the global batch (dp x tokens
per rank) goes through the layer's router, and the tokens that land on plan rank r's expert slots
(num_experts / n contiguous logical experts, identity placement) are run through the grouped
GEMM with exactly those per-expert counts. Dispatch and combine: with W >= 2 ranks, every rank
sends the plan's per-rank all-to-all bytes (sim/cost/alltoall.a2a_bytes: tokens x remote ranks
reached x payload) spread evenly over its W - 1 real peers in one all_to_all_single per phase and
layer, timed as measured (the plan's volume over this machine's links, `a2a_world` in the
records); on one rank they are priced by the simulator's all-to-all model and their records say
source 'modelled'. The routed experts' output is replaced by zeros (their values need the
missing ranks), which changes no shape downstream. With FP8 on (a GPU that has it, no --no-fp8), the
replayed rank's narrow-format weights run FP8 as a measured rank's do.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from rackplan.sim.cost.alltoall import a2a_bytes, a2a_seconds
from rackplan.specs import load_hardware, resolve_profile

from .attention import randn, rms_norm, sub_seed
from .moe import Experts
from .parallel import slot_bounds

MODELLED_OPS = ("moe.dispatch", "moe.combine")


class Replay:
    """The routed-expert path of a Model replaying `plan_rank` of `layout`."""

    def __init__(self, model, plan, layout, plan_rank: int, seed: int, group=None, world: int = 1,
                 fp8: bool = False):
        """`fp8`: the spec's narrow-format weights run as FP8 (fp8.quantise_model), the replayed experts
        included, as the records' `weights` say (the runner sets both from one flag)."""
        self.model, self.layout, self.seed = model, layout, seed
        self.group, self.world, self.rank = group, world, plan_rank
        self.splits: dict[str, list[int]] = {}
        self.buf = torch.empty(0, dtype=torch.uint8, device=model.device)  # send bytes (contents do not matter)
        spec = model.spec
        self.bounds = slot_bounds(spec.moe.num_experts, layout.ep_size)
        lo, hi = self.bounds[plan_rank], self.bounds[plan_rank + 1]
        self.lo, self.hi = lo, hi
        for layer in model.layers:
            if not layer.dense:
                layer.experts = Experts(spec, layer.idx, seed, list(range(lo, hi)), model.dtype, model.device)
        if fp8:
            from .fp8 import quantise_model
            quantise_model(model)
        self.counts: dict[int, torch.Tensor] = {}
        self.rows = torch.empty(0)
        self.hw = load_hardware(plan.hardware)
        # the profile the simulator prices this plan with (the plan's, else the hardware's default); the plan
        # named it, so no hardware check here
        self.prof = resolve_profile(None, plan.profile, self.hw, any_hardware=True)

    def prepare(self, local_tokens: int, step: int) -> None:
        """Route the global batch through each MoE layer's router (not timed) and keep this rank's
        tokens per local expert; allocate the synthetic rows they occupy."""
        spec, dev = self.model.spec, self.model.device
        n_global = local_tokens * self.layout.dp
        most = 0
        for layer in self.model.layers:
            if layer.dense:
                continue
            x = randn((n_global, spec.hidden_size), sub_seed(self.seed, "replay", step, layer.idx),
                      self.model.dtype, dev)
            ids, _ = layer.router(rms_norm(x))  # [n_global, k]
            counts = torch.bincount(ids.reshape(-1), minlength=spec.moe.num_experts)[self.lo:self.hi].cpu()
            self.counts[layer.idx] = counts
            most = max(most, int(counts.sum()))
        if self.rows.shape[0] < most or self.rows.device != torch.device(dev):
            self.rows = randn((most, spec.hidden_size), sub_seed(self.seed, "rows"), self.model.dtype, dev)
        if self.group is not None:
            self._size_exchange(local_tokens)

    def _size_exchange(self, local_tokens: int) -> None:
        """Bytes per real peer of each phase: the plan rank's all-to-all bytes over W - 1 peers."""
        spec, hw = self.model.spec, self.hw
        for phase, dtype in (("dispatch", spec.dtypes.dispatch), ("combine", spec.dtypes.combine)):
            total = sum(a2a_bytes(spec, self.layout, hw, float(local_tokens), dtype))
            per_peer = int(-(-total // (self.world - 1)))
            self.splits[phase] = [0 if p == self.rank else per_peer for p in range(self.world)]
            if self.buf.numel() < per_peer * (self.world - 1):
                self.buf = torch.empty(per_peer * (self.world - 1), dtype=torch.uint8, device=self.model.device)

    def exchange(self, phase: str, timer) -> None:
        """One phase's all-to-all of the plan's bytes among the real ranks (timed as moe.<phase>)."""
        splits = self.splits[phase]
        n = sum(splits)
        out = torch.empty(n, dtype=torch.uint8, device=self.model.device)
        with timer.section(f"moe.{phase}", comm=True):
            dist.all_to_all_single(out, self.buf[:n], splits, splits, group=self.group)

    def moe(self, layer, y, ids, w, timer):
        counts = self.counts[layer.idx]
        rows = self.rows[:int(counts.sum())]
        if self.group is not None:
            self.exchange("dispatch", timer)
        with timer.section("moe.experts"):
            layer.experts(rows, counts)
        if self.group is not None:
            self.exchange("combine", timer)
        return torch.zeros_like(y)

    def modelled_a2a(self, local_tokens: int, n_moe: int, phase: str) -> dict[str, float]:
        """Seconds of dispatch and combine over n_moe layers from the simulator's model."""
        kernel = "high_throughput" if phase == "prefill" else "low_latency"
        return {f"moe.{p}": n_moe * a2a_seconds(self.model.spec, self.layout, self.hw, self.prof,
                                                float(local_tokens), p, kernel)
                for p in ("dispatch", "combine")}

    def expert_tokens(self) -> int:
        """Token-expert pairs on this rank per MoE layer (mean over the layers that ran)."""
        vals = [int(c.sum()) for c in self.counts.values()]
        return round(sum(vals) / len(vals)) if vals else 0
