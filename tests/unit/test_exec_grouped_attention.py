"""Grouped (GQA / MQA) attention without repeated KV heads equals the repeat-then-attend reference."""
import math

import pytest
import torch

from rackplan.executor.attention import grouped_attention

pytestmark = pytest.mark.unit


def _reference(q, k, v, mask):
    """Each query head i attends over key head i // rep, written out head by head."""
    h, hk = q.shape[-3], k.shape[-3]
    rep = h // hk
    outs = []
    for i in range(h):
        s = q[..., i, :, :] @ k[..., i // rep, :, :].transpose(-1, -2) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~mask, -math.inf)
        outs.append(torch.softmax(s, -1) @ v[..., i // rep, :, :])
    return torch.stack(outs, -3)


@pytest.mark.parametrize("h,hk", [(8, 1), (8, 2), (4, 4)])
def test_grouped_attention_matches_per_head_reference(h, hk):
    g = torch.Generator().manual_seed(0)
    n, length, d, dv = 5, 9, 16, 8
    q = torch.randn(3, h, n, d, generator=g)
    k, v = torch.randn(3, hk, length, d, generator=g), torch.randn(3, hk, length, dv, generator=g)
    row, col = torch.arange(n)[:, None] + (length - n), torch.arange(length)[None, :]
    mask = (col <= row) & (col > row - 4)  # a causal band of 4 keys: [n, L]
    got = grouped_attention(q, k, v, mask)
    assert got.shape == (3, h, n, dv)
    torch.testing.assert_close(got, _reference(q, k, v, mask), rtol=1e-5, atol=1e-5)


def test_decode_shape_mask_per_sequence():
    """Decode: one query per sequence, a [B, 1, L] mask (each sequence its own length)."""
    g = torch.Generator().manual_seed(1)
    b, h, length, d = 2, 6, 7, 4
    q, kv = torch.randn(b, h, 1, d, generator=g), torch.randn(b, 1, length, d, generator=g)
    lens = torch.tensor([3, 7])
    mask = (torch.arange(length)[None, :] < lens[:, None])[:, None]  # [B, 1, L]
    got = grouped_attention(q, kv, kv, mask)
    for i in range(b):  # sequence i alone over its own keys
        one = grouped_attention(q[i], kv[i, :, :lens[i]], kv[i, :, :lens[i]], torch.ones(1, int(lens[i]),
                                                                                        dtype=torch.bool))
        torch.testing.assert_close(got[i], one, rtol=1e-5, atol=1e-6)
