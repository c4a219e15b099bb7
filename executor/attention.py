"""Attention and shared building blocks of the executor's model, with weights drawn from a seed.

MLA (DeepSeek-V3): a packed causal prefill path, and the absorbed decode path that scores and
reads the latent KV cache directly (W_uk folded into the query, W_uv applied after). GQA (Qwen3).
A simplified `csa` path for the V4 family: low-rank q, one shared KV head (MQA), grouped
low-rank output, i.e. the spec's per-rank projection GEMM shapes; the sparse indexer is not
executed, attention reads a causal band of `window + topk` tokens instead. A layer reads the band of
the components placed on it (KVComponent.layer_ids: gpt-oss's sliding layers a 128-token band, its
full layers everything). Attention sinks (gpt-oss): one logit per query head joins each softmax
denominator, as gpt-oss's reference sdpa does (the sink column is concatenated to the scores, the
softmax taken, the column dropped).

Every weight is drawn from `sub_seed(seed, layer, name)`, so any rank can build any slice (a DP
replica of attention, its own routed experts) and a single process can build the dense reference.
"""
from __future__ import annotations

import hashlib
import math

import torch
import torch.nn.functional as F

from rackplan.specs import ModelSpec

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def sub_seed(seed: int, *keys) -> int:
    """A 63-bit seed derived from `seed` and any keys (stable across processes and runs)."""
    text = ":".join(str(k) for k in (seed,) + keys)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def compute_dtype(spec: ModelSpec, device: str) -> torch.dtype:
    """fp32/fp16 specs run as declared; anything narrower (fp8, fp4) runs as bf16 on GPU."""
    want = spec.dtypes.compute
    if want in ("fp32", "fp16"):
        return TORCH_DTYPES[want]
    return torch.float32 if device == "cpu" else torch.bfloat16


def randn(shape, seed: int, dtype, device, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale).to(dtype)


def weight(shape, seed: int, dtype, device) -> torch.Tensor:
    """A [fan_in, ...] weight scaled by fan_in^-1/2 (so activations keep unit scale)."""
    return randn(shape, seed, dtype, device, shape[-2] ** -0.5)


def rms_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (rotate-half) over the last dim; x [T, ..., d], pos [T]."""
    d = x.shape[-1]
    freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = pos.float()[:, None] * freqs  # [T, d/2]
    shape = (ang.shape[0],) + (1,) * (x.dim() - 2) + (d // 2,)
    cos, sin = ang.cos().view(shape), ang.sin().view(shape)
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).to(x.dtype)


def swiglu(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """SwiGLU MLP: x [T, H], w13 [H, 2I] (gate | up), w2 [I, H] -> [T, H]."""
    gate, up = (x @ w13).chunk(2, dim=-1)  # [T, I] each
    return (F.silu(gate) * up) @ w2


def causal_attention(q, k, v, seq_lens: list[int], span: int | None = None, sinks=None) -> torch.Tensor:
    """Packed causal attention: q [T, h, dq], k [T, hk, dq], v [T, hk, dv] -> [T, h, dv].

    Sequences are packed back to back (`seq_lens`); `span` limits each query to the last `span`
    keys (a causal band), computed in chunks so memory stays O(T * span); `sinks` [h]: one logit per
    head in each softmax denominator (the band path; SDPA takes none)."""
    out, start = [], 0
    for n in seq_lens:
        qs, ks, vs = (t[start:start + n].transpose(0, 1) for t in (q, k, v))  # [h, n, d], [hk, n, d]
        if (span is None or span >= n) and sinks is None:
            out.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=True,
                                                      enable_gqa=ks.shape[0] != qs.shape[0]))
        else:
            out.append(_banded(qs, ks, vs, span if span is not None and span < n else max(n, 1), sinks))
        start += n
    return torch.cat(out, 1).transpose(0, 1) if out else q.new_zeros(0, q.shape[1], v.shape[-1])


def _banded(q, k, v, span: int, sinks=None) -> torch.Tensor:
    """Causal attention where query i sees keys (i - span, i]; q, k, v [h, n, d]; sinks [h] or None."""
    # query rows per chunk: the band's width (at least 256); a band as wide as the sequence (full causal
    # attention with sinks) 512 rows, so memory stays O(512 x n) per head
    n, parts = q.shape[1], []
    chunk = max(span, 256) if span < n else 512
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        k0 = max(0, s - span + 1)
        qi = torch.arange(s, e, device=q.device)[:, None]
        kj = torch.arange(k0, e, device=q.device)[None, :]
        mask = (kj <= qi) & (kj > qi - span)  # [e-s, e-k0]
        parts.append(grouped_attention(q[:, s:e], k[:, k0:e], v[:, k0:e], mask, sinks))
    return torch.cat(parts, 1)


def grouped_attention(q, k, v, mask, sinks=None) -> torch.Tensor:
    """Masked attention where each group of h / hk query heads shares one key/value head (GQA; MQA
    at hk = 1), without repeating the shared heads: q [..., h, n, dq], k [..., hk, L, dq], v [..., hk, L, dv],
    mask (True = attend) broadcastable to [..., n, L] -> [..., h, n, dv]. `sinks` [h] (or None): a logit per
    query head added as one more column of the softmax, with no value (gpt-oss's attention sinks).

    The rep = h / hk query heads of a group are folded into the query rows of one matmul against their
    key head ([..., hk, rep * n, dq] @ [..., hk, dq, L]), so nothing of size rep x L x d is materialised
    (a repeat_interleave of V4.1's one KV head over 64 query heads was 6.7 GB per tensor per layer at a
    batch-64 decode replay)."""
    *lead, h, n, dq = q.shape
    hk, length = k.shape[-3], k.shape[-2]
    rep = h // hk
    qg = q.reshape(*lead, hk, rep * n, dq)  # heads are grouped contiguously (head i uses key head i // rep)
    s = torch.matmul(qg, k.transpose(-1, -2)).float() / math.sqrt(dq)  # [..., hk, rep * n, L]
    s = s.view(*lead, hk, rep, n, length).masked_fill(~mask.unsqueeze(-3).unsqueeze(-3), -math.inf)
    if sinks is None:
        p = torch.softmax(s, -1)
    else:  # [hk, rep, 1, 1] -> one more column [..., hk, rep, n, 1]; its probability is dropped
        sink = sinks.float().view(hk, rep, 1, 1).expand(*s.shape[:-1], 1)
        p = torch.softmax(torch.cat((s, sink), -1), -1)[..., :length]
    p = p.to(v.dtype).reshape(*lead, hk, rep * n, length)
    return torch.matmul(p, v).view(*lead, h, n, v.shape[-1])  # [..., h, n, dv]


def _with_past(entry, past, seq_lens):
    """Packed [sum(P_i + n_i), D]: each sequence's earlier entries, then its chunk's."""
    parts, start = [], 0
    for p, n in zip(past, seq_lens, strict=True):
        parts += [p, entry[start:start + n]]
        start += n
    return torch.cat(parts, 0) if parts else entry


def prefix_attention(q, k, v, seq_lens: list[int], prefix: list[int], span: int | None = None, sinks=None):
    """Chunked-prefill attention: q [T, h, dq] packed chunks of n_i tokens at positions P_i..;
    k [L, hk, dq], v [L, hk, dv] packed per sequence as P_i + n_i entries -> [T, h, dv]."""
    out, qs, ks = [], 0, 0
    for n, p in zip(seq_lens, prefix, strict=True):
        qi = q[qs:qs + n].transpose(0, 1)  # [h, n, dq]
        ki, vi = (t[ks:ks + p + n].transpose(0, 1) for t in (k, v))  # [hk, P+n, d]
        row = torch.arange(p, p + n, device=q.device)[:, None]
        col = torch.arange(p + n, device=q.device)[None, :]
        mask = (col <= row) & ((col > row - span) if span else True)  # [n, P+n]
        out.append(grouped_attention(qi, ki, vi, mask, sinks))
        qs, ks = qs + n, ks + p + n
    return torch.cat(out, 1).transpose(0, 1) if out else q.new_zeros(0, q.shape[1], v.shape[-1])


class KVCache:
    """Per layer a padded [slots, max_ctx, entry_dim] cache and per-slot lengths."""

    def __init__(self, num_layers: int, slots: int, max_ctx: int, entry_dim: int, dtype, device):
        self.data = [torch.zeros(slots, max_ctx, entry_dim, dtype=dtype, device=device)
                     for _ in range(num_layers)]
        self.lens = torch.zeros(slots, dtype=torch.long, device=device)
        self.max_ctx = max_ctx
        self.kept: dict[int, list[torch.Tensor]] = {}  # rid -> per layer [tokens, D] set aside (keep)

    def keep(self, preempted, chunks) -> None:
        """Before a step (its installs and chunks): set aside the KV that each sequence preempted in it
        keeps cached (serving.Kept: its old slot's full blocks), then copy into a readmitted sequence's
        new slot the first `start` positions of its chunk, which the policy counts as cached (vLLM V1's
        prefix cache keeps a preempted request's freed blocks: no copy there, so none is timed; this
        padded per-slot cache needs one)."""
        for k in preempted:
            self.kept.pop(k.rid, None)
            if k.tokens:
                self.kept[k.rid] = [d[k.slot, :k.tokens].clone() for d in self.data]
        for c in chunks:
            kv = self.kept.pop(c.rid, None)
            if kv is not None and c.start:
                for d, x in zip(self.data, kv, strict=True):
                    d[c.slot, :c.start] = x[:c.start]

    def read(self, layer: int, slots: torch.Tensor | None, upto: int) -> torch.Tensor:
        """[B, upto, D]: a view when `slots` is None (slots 0..B-1 in order), else gathered."""
        d = self.data[layer]
        return d[:, :upto] if slots is None else d[slots, :upto]


class Attention(torch.nn.Module):
    """MLA (kind 'mla'), or one head-based path for 'gqa' and the simplified 'csa'."""

    def __init__(self, spec: ModelSpec, layer: int, seed: int, dtype, device):
        super().__init__()
        a, h = spec.attention, spec.hidden_size
        self.kind, self.heads = a.kind, a.num_heads
        self.w = {name: weight((fi, fo), sub_seed(seed, layer, "attn", name), dtype, device)
                  for name, fi, fo in a.projections(h)}
        if a.kind == "mla":
            self.dn, self.dr, self.r, self.dv = (a.qk_nope_head_dim, a.qk_rope_head_dim, a.kv_lora_rank,
                                                 a.v_head_dim)
            self.entry_dim = self.r + self.dr
            kvb = self.w["kv_b"].view(self.r, self.heads, self.dn + self.dv)  # [r, h, dn+dv]
            self.w_uk = kvb[..., :self.dn].permute(1, 2, 0).contiguous()  # [h, dn, r]
            self.w_uv = kvb[..., self.dn:].permute(1, 0, 2).contiguous()  # [h, r, dv]
        else:
            self.d, self.kvh = a.head_dim, (a.num_kv_heads if a.kind == "gqa" else 1)
            self.entry_dim = self.d * self.kvh * (2 if a.kind == "gqa" else 1)
            self.groups = a.o_groups or 1
        comps = [c for c in spec.kv_on_layer(layer) if c.window is not None or c.topk is not None]
        self.span = (sum(c.window or 0 for c in comps) + sum(c.topk or 0 for c in comps)) or None
        if a.kind == "mla":
            self.span = None
        # [h] fp32 sink logits of this layer (gpt-oss), drawn like a weight; None without sinks
        self.sinks = randn((a.num_heads,), sub_seed(seed, layer, "attn", "sinks"), torch.float32, device) \
            if a.sinks and a.kind != "mla" else None

    def _q(self, x):  # x [T, H] -> [T, h, dq]
        w = self.w
        q = rms_norm(x @ w["q_a"]) @ w["q_b"] if "q_a" in w else x @ w["q"]
        return q.view(x.shape[0], self.heads, -1)

    def _out(self, o):  # o [T, h, dv] -> [T, H]
        if self.kind != "csa":
            return o.flatten(1) @ self.w["o"]
        t, g = o.shape[0], self.groups
        og = o.flatten(1).view(t, g, -1).transpose(0, 1)  # [g, T, h*d/g]
        wa = self.w["o_a"].view(g, -1, self.w["o_a"].shape[1])  # [g, h*d/g, o_lora]
        return torch.bmm(og, wa).transpose(0, 1).flatten(1) @ self.w["o_b"]  # [T, H]

    def _kv_entry(self, x, pos):
        """The cache entry of each token: [T, entry_dim] (MLA: normed latent | roped k_pe)."""
        kv = x @ (self.w["kv_a"] if self.kind == "mla" else self.w["kv"])
        if self.kind == "mla":
            return torch.cat((rms_norm(kv[:, :self.r]), rope(kv[:, self.r:], pos)), -1)
        if self.kind == "csa":
            return torch.cat((rms_norm(kv[:, :self.d // 2]), rope(kv[:, self.d // 2:], pos)), -1)
        k, v = kv.chunk(2, -1)
        k = rope(k.view(-1, self.kvh, self.d), pos).flatten(1)
        return torch.cat((k, v), -1)

    def prefill(self, x, pos, seq_lens, timer, past=None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, H] packed prompts (or prompt chunks), pos [T] -> (out [T, H], cache entries
        [T, entry_dim]). `past`: per sequence the cache entries of its earlier chunks [P_i, D]
        (chunked prefill); the chunk attends over them and itself."""
        with timer.section("attn.proj"):
            q = self._q(x)  # [T, h, dq]
            entry = self._kv_entry(x, pos)
            keys = entry if past is None else _with_past(entry, past, seq_lens)  # [L, D]
            q, k, v = self._qkv(q, keys, pos)
        with timer.section("attn.core"):
            if past is None:
                o = causal_attention(q, k, v, seq_lens, self.span, self.sinks)  # [T, h, dv]
            else:
                o = prefix_attention(q, k, v, seq_lens, [p.shape[0] for p in past], self.span, self.sinks)
        with timer.section("attn.proj"):
            return self._out(o), entry

    def _qkv(self, q, keys, pos):
        """Roped queries [T, h, dq] and keys/values [L, h|kvh, d] from cache entries [L, D]."""
        if self.kind != "mla":
            return self._split_heads(q, keys, pos)
        n = keys.shape[0]
        kvb = (keys[:, :self.r] @ self.w["kv_b"]).view(n, self.heads, -1)  # [L, h, dn+dv]
        k_pe = keys[:, None, self.r:].expand(n, self.heads, self.dr)
        k = torch.cat((kvb[..., :self.dn], k_pe), -1)  # [L, h, dn+dr]
        q = torch.cat((q[..., :self.dn], rope(q[..., self.dn:], pos)), -1)
        return q, k, kvb[..., self.dn:]

    def _split_heads(self, q, entry, pos):
        """gqa/csa: roped queries [T, h, d] and keys/values [T, kvh, d] from cache entries."""
        if self.kind == "csa":  # one shared head serves as key and value (MQA); rope on half
            half = self.d // 2
            q = torch.cat((q[..., :half], rope(q[..., half:], pos)), -1)
            kv = entry.unflatten(-1, (1, self.d))
            return q, kv, kv
        k, v = entry.chunk(2, -1)
        return rope(q, pos), k.unflatten(-1, (self.kvh, self.d)), v.unflatten(-1, (self.kvh, self.d))

    def decode(self, x, pos, cache: KVCache, layer: int, slots, timer, pos_range=None) -> torch.Tensor:
        """One new token per sequence: x [B, H], pos [B] (= context before it) -> [B, H].

        Appends this token's entry to the cache, then attends over entries 0..pos. `pos_range`
        (min, max of pos, host ints) avoids a device sync (needed inside a CUDA graph)."""
        b = x.shape[0]
        with timer.section("attn.proj"):
            q = self._q(x)  # [B, h, dq]
            entry = self._kv_entry(x, pos)  # [B, D]
        with timer.section("attn.core"):
            idx = torch.arange(b, device=x.device) if slots is None else slots
            cache.data[layer][idx, pos] = entry
            p_min, p_max = pos_range if pos_range is not None else (
                (int(pos.min()), int(pos.max())) if b else (0, 0))
            upto = p_max + 1
            lo = (pos - self.span + 1).clamp(min=0) if self.span else torch.zeros_like(pos)
            first = max(0, p_min - self.span + 1) if self.span else 0  # a band reads only its last span
            kv = cache.read(layer, slots, upto)[:, first:]  # [B, L, D]
            ar = torch.arange(first, upto, device=x.device)[None, :]
            mask = (ar <= pos[:, None]) & (ar >= lo[:, None])  # [B, L]
            o = self._decode_core(q, kv, pos, mask)  # [B, h, dv]
        with timer.section("attn.proj"):
            return self._out(o)

    def _decode_core(self, q, kv, pos, mask):
        if self.kind == "mla":  # absorbed: score and read the latent directly
            q_lat = torch.einsum("bhd,hdr->bhr", q[..., :self.dn], self.w_uk)  # [B, h, r]
            q_pe = rope(q[..., self.dn:], pos)  # [B, h, dr]
            s = (torch.einsum("bhr,blr->bhl", q_lat, kv[..., :self.r])
                 + torch.einsum("bhd,bld->bhl", q_pe, kv[..., self.r:])) / math.sqrt(self.dn + self.dr)
            p = torch.softmax(s.float().masked_fill(~mask[:, None], -math.inf), -1).to(q.dtype)
            ctx = torch.einsum("bhl,blr->bhr", p, kv[..., :self.r])  # [B, h, r]
            return torch.einsum("bhr,hrv->bhv", ctx, self.w_uv)  # [B, h, dv]
        q, k, v = self._split_heads(q, kv, pos)  # q [B, h, d]; k, v [B, L, kvh, d]
        return grouped_attention(q[:, :, None], k.transpose(1, 2), v.transpose(1, 2), mask[:, None],
                                 self.sinks)[:, :, 0]
