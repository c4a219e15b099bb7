"""Paged KV: a sequence holds whole blocks of the engine's block size, allocated as it grows.

As vLLM's KV cache manager: a running sequence holds ceil(tokens / block) blocks; a rank's blocks
are its KV capacity in tokens over the block size (a partial block at the end is no block).
"""
from __future__ import annotations

import math

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


def longest_admitted(kv_tokens: float, block: int, queries: int = 1) -> int:
    """Tokens of the longest sequence one rank admits: its whole blocks, less the step's queries (the
    query token and any draft tokens: Layout.queries_per_step), what a request's prompt, or prompt +
    output, must fit in."""
    return capacity_blocks(kv_tokens, block) * block - queries
