"""Router, routed experts, shared expert / dense FFN, and the single-process MoE reference.

Router (DeepSeek-V3 `Gate`): scores = softmax | sigmoid | sqrt(softplus) of x @ W; a per-expert
bias steers the selection only (noaux_tc); with num_groups > 1 the top `topk_groups` groups are
picked first (by their best two biased scores, or best one under softmax); sigmoid-type weights
are renormalised over the top-k; all are scaled by `routed_scaling`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rackplan.specs import ModelSpec

from .attention import randn, sub_seed, swiglu, weight
from .kernels.grouped_gemm import grouped_gemm


class Router(torch.nn.Module):
    def __init__(self, spec: ModelSpec, layer: int, seed: int, device):
        super().__init__()
        m, h = spec.moe, spec.hidden_size
        self.moe = m
        self.w = weight((h, m.num_experts), sub_seed(seed, layer, "router"), torch.float32, device)
        self.bias = randn((m.num_experts,), sub_seed(seed, layer, "router.bias"), torch.float32, device, 0.1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, H] -> (expert ids [T, k] int64, weights [T, k] fp32)."""
        m = self.moe
        logits = x.float() @ self.w  # [T, E]
        if m.scoring == "softmax":
            scores = logits.softmax(-1)
        elif m.scoring == "sigmoid":
            scores = logits.sigmoid()
        else:
            scores = F.softplus(logits).sqrt()
        biased = scores if m.scoring == "softmax" else scores + self.bias
        if m.num_groups > 1:
            biased = self._mask_groups(biased)
        ids = biased.topk(m.top_k, dim=-1).indices  # [T, k]
        w = scores.gather(1, ids)
        if m.scoring != "softmax":
            w = w / w.sum(-1, keepdim=True)
        return ids, w * m.routed_scaling

    def _mask_groups(self, biased: torch.Tensor) -> torch.Tensor:
        m, t = self.moe, biased.shape[0]
        g = biased.view(t, m.num_groups, m.num_experts // m.num_groups)  # [T, G, E/G]
        best = g.amax(-1) if m.scoring == "softmax" else g.topk(min(2, g.shape[-1]), -1).values.sum(-1)
        keep = best.topk(m.topk_groups, -1).indices  # [T, topk_groups]
        mask = torch.ones_like(best, dtype=torch.bool).scatter_(1, keep, False)  # True: dropped
        return g.masked_fill(mask[..., None], float("-inf")).view(t, m.num_experts)


class MLP(torch.nn.Module):
    """SwiGLU FFN: the dense FFN of the first layers, or the shared expert(s) of a MoE layer."""

    def __init__(self, hidden: int, inter: int, seed: int, dtype, device):
        super().__init__()
        self.w13 = weight((hidden, 2 * inter), sub_seed(seed, "w13"), dtype, device)  # [H, 2I]
        self.w2 = weight((inter, hidden), sub_seed(seed, "w2"), dtype, device)  # [I, H]

    def forward(self, x):
        return swiglu(x, self.w13, self.w2)


class Experts(torch.nn.Module):
    """The routed experts held in this rank's slots: w13 [S, H, 2I], w2 [S, I, H].

    `logical` lists the logical expert of each local slot; an expert's weights depend only on
    (seed, layer, logical id), so replicas and the dense reference agree bit for bit."""

    def __init__(self, spec: ModelSpec, layer: int, seed: int, logical: list[int], dtype, device):
        super().__init__()
        h, i = spec.hidden_size, spec.moe.expert_intermediate
        self.logical = list(logical)
        self.rows = 0  # token-expert pairs computed since the runner last reset it
        mk = lambda e, name, shape: weight(shape, sub_seed(seed, layer, "expert", e, name), dtype, device)
        self.w13 = torch.stack([mk(e, "w13", (h, 2 * i)) for e in logical]) if logical else \
            torch.zeros(0, h, 2 * i, dtype=dtype, device=device)
        self.w2 = torch.stack([mk(e, "w2", (i, h)) for e in logical]) if logical else \
            torch.zeros(0, i, h, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x [N, H] rows grouped by slot, counts [S] rows per slot -> [N, H]."""
        self.rows += x.shape[0]
        gate, up = _grouped(x, self.w13, counts).chunk(2, dim=-1)  # [N, I] each
        return _grouped(F.silu(gate) * up, self.w2, counts)


def _grouped(x, w, counts):
    """Grouped GEMM over a weight stack: the Triton kernel, or one FP8 GEMM per slot (fp8.py)."""
    return w.grouped(x, counts) if hasattr(w, "grouped") else grouped_gemm(x, w, counts)


def moe_reference(x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, experts: Experts) -> torch.Tensor:
    """Dense reference: out[t] = sum_j w[t, j] * expert_{ids[t, j]}(x[t]); `experts` holds all
    logical experts in order. x [T, H], ids/w [T, k] -> [T, H] (fp32 accumulate)."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in range(experts.w13.shape[0]):
        tok, j = (ids == e).nonzero(as_tuple=True)
        if tok.numel():
            y = swiglu(x[tok], experts.w13[e], experts.w2[e]).float()
            out.index_add_(0, tok, y * w[tok, j, None])
    return out.to(x.dtype)
