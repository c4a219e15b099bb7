"""The executor's gpt-oss attention: sliding and full layers placed as the spec's layer_ids say, attention sinks in
every softmax denominator, checked against a plain PyTorch reference written as gpt-oss's own sdpa (scores,
causal + window mask, the sink column concatenated, softmax, the sink column dropped)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rackplan.executor.attention import Attention, KVCache, causal_attention
from rackplan.executor.timing import NullTimer
from rackplan.executor.tp import shard_attention
from rackplan.specs.hf_config import load_config_spec

pytestmark = pytest.mark.unit
TINY = Path(__file__).resolve().parents[1] / "data" / "hf_tiny" / "tiny-gpt-oss"  # layer_types: S F S F, window 16
SEED, N = 7, 40  # 40 tokens: past the 16-token window


@pytest.fixture(scope="module")
def spec():
    return load_config_spec(TINY / "config.json")


def _reference(q, k, v, window, sinks):
    """q [T, h, d], k/v [T, hk, d]; query i sees keys (i - window, i] (all of 0..i when window is None) and one
    sink logit per head in its softmax -> [T, h, d]."""
    t, h, d = q.shape
    rep = h // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)  # [T, h, d]
    s = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / math.sqrt(d)  # [h, T, T]
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    allowed = (j <= i) & ((j > i - window) if window else True)
    s = s.masked_fill(~allowed, -math.inf)
    s = torch.cat((s, sinks.float().view(h, 1, 1).expand(h, t, 1)), -1)
    w = torch.softmax(s, -1)[..., :-1]
    return torch.einsum("hqk,khd->qhd", w, v.float())


def _layer(spec, layer):
    return Attention(spec, layer, SEED, torch.float32, "cpu")


def _inputs(spec, seed=0):
    x = torch.randn(N, spec.hidden_size, generator=torch.Generator().manual_seed(seed))
    return x, torch.arange(N)


def _expected(attn, x, pos, window):
    q = attn._q(x)
    q, k, v = attn._qkv(q, attn._kv_entry(x, pos), pos)
    return attn._out(_reference(q, k, v, window, attn.sinks).to(x.dtype))


def test_spec_places_sliding_and_full_layers_and_sinks(spec):
    kv = {c.name: c for c in spec.attention.kv}
    assert (kv["swa"].layer_ids, kv["swa"].window) == ((0, 2), 16)
    assert (kv["full"].layer_ids, kv["full"].window) == ((1, 3), None)
    assert spec.attention.sinks
    assert [_layer(spec, i).span for i in range(4)] == [16, None, 16, None]


@pytest.mark.parametrize("layer", [0, 1, 2, 3])
def test_prefill_and_decode_match_reference(spec, layer):
    """A prompt of N tokens (prefill) and one more token (decode over the cache) equal the reference at each
    layer's own window (16 on the sliding layers, none on the full ones), sinks included."""
    attn = _layer(spec, layer)
    window = 16 if layer % 2 == 0 else None
    x, pos = _inputs(spec)
    out, entry = attn.prefill(x[:-1], pos[:-1], [N - 1], NullTimer())
    ref = _expected(attn, x, pos, window)  # [N, H]: row i is query i over keys 0..i
    torch.testing.assert_close(out, ref[:-1], rtol=1e-4, atol=1e-5)
    cache = KVCache(1, 1, N, attn.entry_dim, torch.float32, "cpu")
    cache.data[0][0, :N - 1] = entry
    got = attn.decode(x[-1:], pos[-1:], cache, 0, None, NullTimer())
    torch.testing.assert_close(got, ref[-1:], rtol=1e-4, atol=1e-5)


def test_sinks_enter_the_denominator(spec):
    """Without its sinks a layer's output differs from the reference with them (the sinks act), and equals it
    with sinks of -inf (exp(-inf) = 0 adds nothing to the denominator)."""
    attn = _layer(spec, 1)
    x, pos = _inputs(spec)
    with_sinks, _ = attn.prefill(x, pos, [N], NullTimer())
    attn.sinks = torch.full_like(attn.sinks, -math.inf)
    no_sinks, _ = attn.prefill(x, pos, [N], NullTimer())
    attn.sinks = None
    plain, _ = attn.prefill(x, pos, [N], NullTimer())  # SDPA's causal path
    torch.testing.assert_close(no_sinks, plain, rtol=1e-4, atol=1e-5)
    assert (with_sinks - plain).abs().max() > 1e-3


@pytest.mark.parametrize("layer,sees_token_0", [(0, False), (1, True)])
def test_full_layer_sees_beyond_the_window(spec, layer, sees_token_0):
    """Changing token 0 changes the last query's output (N - 1 > window) on a full layer only."""
    attn = _layer(spec, layer)
    x, pos = _inputs(spec)
    x2 = x.clone()
    x2[0] = torch.randn(spec.hidden_size, generator=torch.Generator().manual_seed(9))
    a, _ = attn.prefill(x, pos, [N], NullTimer())
    b, _ = attn.prefill(x2, pos, [N], NullTimer())
    assert bool((a[-1] - b[-1]).abs().max() > 1e-4) is sees_token_0


def test_tp_keeps_the_sinks_of_its_heads(spec):
    full = _layer(spec, 0).sinks
    attn = _layer(spec, 0)
    shard_attention(attn, 2, 1)
    torch.testing.assert_close(attn.sinks, full[2:4])


@pytest.mark.parametrize("span", [None, 16])
def test_long_prompt_in_chunks_matches_reference(span):
    """600 tokens: past one 512-row chunk of the full-causal path with sinks, and many chunks of a 16-token band."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(600, 4, 8, generator=g)
    k, v = torch.randn(600, 2, 8, generator=g), torch.randn(600, 2, 8, generator=g)
    sinks = torch.randn(4, generator=g)
    got = causal_attention(q, k, v, [600], span, sinks)
    torch.testing.assert_close(got, _reference(q, k, v, span, sinks), rtol=1e-4, atol=1e-5)
