"""FP8 weights: e4m3 weights with one fp32 scale per output column, activations quantised per row
on the fly, GEMMs through torch._scaled_mm (row-wise scaling needs sm89+ on CUDA; the same call
runs on CPU, which the tests use).

A spec whose weights are 8-bit or narrower (fp8, fp8_block, mxfp8; the 4-bit formats run as FP8,
the narrowest the executor has) gets FP8 weights on a GPU that supports them: attention
projections (attention_weights), dense FFN and shared experts (dense_weights), routed experts
(expert_weights). The LM head, the router (fp32) and the tensors the MLA absorbed path or the csa
grouped output reshape stay in the compute dtype. Quantise after TP sharding (scales per shard).
"""
from __future__ import annotations

import torch

E4M3_MAX = 448.0  # largest finite float8_e4m3fn
NARROW = ("fp8", "fp8_block", "mxfp8", "mxfp4", "fp4", "nvfp4")  # weight formats that run as FP8


def supported(device: str) -> bool:
    """FP8 GEMMs with row-wise scales: CUDA compute capability 8.9 (Ada) or newer."""
    if not device.startswith("cuda") or not hasattr(torch, "float8_e4m3fn"):
        return False
    return torch.cuda.get_device_capability(torch.device(device)) >= (8, 9)


def _quantise(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 values and fp32 scales (amax / 448 along `dim`)."""
    scale = x.float().abs().amax(dim, keepdim=True).clamp(min=1e-12) / E4M3_MAX
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


class FP8Weight:
    """A [K, N] weight as e4m3 (column-major, as _scaled_mm's second operand wants) and a [1, N]
    fp32 scale; `x @ w` works as for a tensor: x [..., K] -> [..., N] in the weight's dtype."""

    def __init__(self, w: torch.Tensor):
        q, self.scale = _quantise(w, 0)  # scale [1, N]
        self.q = q.t().contiguous().t()  # [K, N], column-major
        self.shape, self.dtype = w.shape, w.dtype

    def __rmatmul__(self, x: torch.Tensor) -> torch.Tensor:
        lead, k = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, k)
        if x2.shape[0] == 0:
            return x.new_zeros(*lead, self.shape[1])
        xq, sx = _quantise(x2, 1)  # per-row scales [M, 1]
        y = torch._scaled_mm(xq, self.q, scale_a=sx, scale_b=self.scale, out_dtype=self.dtype)
        return y.reshape(*lead, self.shape[1])


class FP8Stack:
    """Routed experts' weights [S, K, N] as one FP8Weight per slot."""

    def __init__(self, w: torch.Tensor):
        self.slots = [FP8Weight(w[s]) for s in range(w.shape[0])]
        self.shape, self.dtype = w.shape, w.dtype

    def grouped(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x [N, K] rows grouped by slot, counts [S] -> [N, N_out] (one FP8 GEMM per slot)."""
        out = x.new_empty(x.shape[0], self.shape[2])
        start = 0
        for s, n in enumerate(counts.tolist()):
            if n:
                out[start:start + n] = x[start:start + n] @ self.slots[s]
            start += n
        return out

    def batched(self, x: torch.Tensor) -> torch.Tensor:
        """x [S, M, K] -> [S, M, N_out] (the static path's padded blocks)."""
        return torch.stack([x[s] @ w for s, w in enumerate(self.slots)]) if self.slots else \
            x.new_zeros(0, x.shape[1], self.shape[2])


def quantise_model(model) -> dict[str, str]:
    """Replace the spec's narrow-format weights of a built (and TP-sharded) Model by FP8 ones in
    place; returns the dtype each weight family runs in (for the records)."""
    dt = model.spec.dtypes
    fams = {"attention": dt.attention_weights in NARROW, "dense": dt.dense_weights in NARROW,
            "experts": dt.expert_weights in NARROW}
    keep = {"kv_b", "o_a"}  # reshaped by the MLA absorbed path / the csa grouped output
    for layer in model.layers:
        if fams["attention"]:
            layer.attn.w.update({n: FP8Weight(w) for n, w in layer.attn.w.items() if n not in keep})
        for mlp in (getattr(layer, "ffn", None), getattr(layer, "shared", None)):
            if mlp is not None and fams["dense"]:
                mlp.w13, mlp.w2 = FP8Weight(mlp.w13), FP8Weight(mlp.w2)
        if not layer.dense and fams["experts"] and layer.experts.logical:
            layer.experts.w13, layer.experts.w2 = FP8Stack(layer.experts.w13), FP8Stack(layer.experts.w2)
    compute = str(model.dtype).replace("torch.", "")
    return {k: "fp8" if v else compute for k, v in fams.items()}
