"""Paged KV: a sequence holds whole blocks of the engine's block size, allocated as it grows.

As vLLM's KV cache manager: a running sequence holds ceil(tokens / block) blocks; a rank's blocks
are its KV capacity in tokens over the block size (a partial block at the end is no block).
Sliding-window layers placed by the spec (gpt-oss's layer_types, KVComponent.layer_ids) are a KV cache
group of their own in vLLM's hybrid manager, paged from the same pool: their blocks that leave the
window go back to it (vllm/v1/core/single_type_kv_cache_manager.py SlidingWindowManager.remove_skipped_blocks,
on every allocation), so a sequence holds the window's blocks beside its context (`window_tokens`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rackplan.specs import ModelSpec

# Tokens per KV block. vLLM CacheConfig.block_size defaults to 16 on CUDA; its MLA backends
# (FlashMLA, CUTLASS MLA, FlashInfer MLA) page in 64-token blocks (vllm/platforms/cuda.py sets 64
# for them), and so do the compressed-KV kernels of the V4 family that reuse them.
BLOCK_TOKENS = 16
MLA_BLOCK_TOKENS = 64


def block_tokens(attention_kind: str) -> int:
    """The engine's KV block size (tokens) for a model's attention kind ('mla', 'csa', 'gqa')."""
    return MLA_BLOCK_TOKENS if attention_kind in ("mla", "csa") else BLOCK_TOKENS


def blocks(tokens: float, block: int) -> int:
    """Blocks that hold `tokens` tokens of KV (a fluid token count rounds up too)."""
    return math.ceil(tokens / block) if tokens > 0 else 0


def capacity_blocks(kv_tokens: float, block: int) -> int:
    """Whole blocks in a rank's KV capacity of `kv_tokens` tokens."""
    return int(kv_tokens // block)


def longest_admitted(kv_tokens: float, block: int, queries: int = 1, window: int = 0) -> int:
    """Tokens of the longest sequence one rank admits: its whole blocks, less the step's queries (the
    query token and any draft tokens: Layout.queries_per_step) and the `window` tokens it holds beside
    its context (window_tokens), what a request's prompt, or prompt + output, must fit in."""
    return capacity_blocks(kv_tokens, block) * block - queries - window


def window_tokens(model: "ModelSpec", block: int) -> int:
    """KV a sequence holds for its placed sliding-window layers, in tokens of the model's full-context KV
    (ModelSpec.kv_bytes_per_token: the unit the rank's capacity counts in): per such component, the blocks
    SlidingWindowManager keeps at most, ceil((window - 1) / block) + 1 (the keys (c - window, c] a query
    at c reads, across block edges), times its bytes per token over the full-context ones. gpt-oss-120b:
    9 blocks of 16 on 18 sliding layers, as many bytes per token as its 18 full ones: 144 tokens.
    A window not placed on layers of its own (DeepSeek-V4's, beside its compressed KV on every layer) is
    not charged here, nor is a prefill chunk's transient window blocks (its tokens, freed next step)."""
    full = model.kv_bytes_per_token
    extra = sum((math.ceil((c.window - 1) / block) + 1) * block * c.entry_bytes * c.stored_layers / c.ratio
                for c in model.attention.kv if c.window is not None and c.layer_ids is not None)
    return math.ceil(extra / full) if extra and full > 0 else 0
