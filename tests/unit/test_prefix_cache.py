"""Prefix cache: longest leading-block match, LRU eviction (a prompt's tail first), cached tokens,
and the hit rate of the Mooncake sample computed by hand."""
from pathlib import Path

import numpy as np
import pytest

from rackplan.sim.prefix_cache import InstancePrefixes, PrefixCache, cached_tokens
from rackplan.sim.traces import read_trace

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[1] / "data"


def test_match_is_the_leading_run():
    c = PrefixCache(10)
    c.insert([1, 2, 3])
    assert c.match([1, 2, 3, 4]) == 3
    assert c.match([1, 2, 9, 3]) == 2  # stops at the first block it lacks
    assert c.match([]) == 0


def test_match_has_no_side_effect_lookup_touches():
    c = PrefixCache(4)
    c.insert([1, 2])  # LRU order (oldest first): 2, 1
    c.insert([3, 4])  # 2, 1, 4, 3
    assert c.match([1, 2]) == 2
    c.insert([5])  # full: evicts 2, the oldest; a match does not refresh
    assert 2 not in c and c.match([1, 2]) == 1
    c = PrefixCache(4)
    c.insert([1, 2])
    c.insert([3, 4])
    assert c.lookup([1, 2]) == 2  # touched: 4, 3, 2, 1
    c.insert([5])  # evicts 4, the tail of the request least recently used
    assert 4 not in c and c.match([1, 2]) == 2 and c.match([3, 4]) == 1


def test_eviction_takes_a_prompt_tail_first():
    c = PrefixCache(3)
    c.insert([1, 2, 3, 4, 5])  # more blocks than room: the head stays
    assert len(c) == 3 and c.match([1, 2, 3, 4, 5]) == 3
    c.insert([7])
    assert c.match([1, 2, 3]) == 2  # block 3 (the tail) left first


def test_capacity_must_hold_a_block():
    with pytest.raises(ValueError):
        PrefixCache(0)


@pytest.mark.parametrize("hit,isl,expected", [(0, 1000, 0), (1, 1000, 512), (2, 1000, 999), (2, 1024, 1023)])
def test_cached_tokens_leave_one_token_to_compute(hit, isl, expected):
    assert cached_tokens(hit, 512, isl) == expected


def test_mooncake_sample_hit_rate_by_hand():
    """One cache with room for everything, requests in trace order, each prefill done before the next:
      r0 [0..5]              miss                  r4 [0..5,30]      6 blocks = 3072 tokens
      r1 [0,1,2,3,20,21]     4 blocks = 2048       r5 [0..3,20,21,32] 6 blocks = 3072
      r2 [10..15]            miss                  r6 [10..15,31]    6 blocks = 3072
      r3 [10..13,22]         4 blocks = 2048       r7 [10..13,22,33] 5 blocks = 2560
    hits 2 * 2048 + 3 * 3072 + 2560 = 15872 of 3 * 2972 + 2400 + 3 * 3500 + 3000 = 24816 prompt tokens."""
    t = read_trace(DATA / "mooncake_prefix.jsonl")
    cached = np.zeros(len(t), dtype=np.int64)
    inst = InstancePrefixes(1e6, t.blocks, t.block_size, t.isl, cached)
    for rid in range(len(t)):
        assert inst.hit_tokens(rid) == inst.schedule(rid)  # the router sees what scheduling gets
        inst.finish(rid)
    assert list(cached) == [0, 2048, 0, 2048, 3072, 3072, 3072, 2560]
    assert cached.sum() / t.isl.sum() == pytest.approx(15872 / 24816)


def test_small_cache_evicts_by_hand():
    """Room for 8 blocks (4096 tokens), LRU order oldest first:
      r0 inserts 0-5 tail first             -> 5 4 3 2 1 0
      r1 hits 0-3, inserts 20 21            -> 5 4 21 20 3 2 1 0                  (8 blocks)
      r2 misses, inserts 10-15              -> evicts 5 4 21 20 3 2: 1 0 15 14 13 12 11 10
      r3 hits 10-13 (2048), inserts 22      -> evicts 1: 0 15 14 22 13 12 11 10
      r4 [0..5,30] finds 0 but not 1: 1 block = 512 tokens."""
    t = read_trace(DATA / "mooncake_prefix.jsonl")
    cached = np.zeros(len(t), dtype=np.int64)
    inst = InstancePrefixes(8 * 512 + 100, t.blocks, t.block_size, t.isl, cached)  # whole blocks only
    assert inst.cache.capacity_blocks == 8
    for rid in range(5):
        inst.schedule(rid)
        inst.finish(rid)
    assert list(cached[:5]) == [0, 2048, 0, 2048, 512]
