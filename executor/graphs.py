"""Decode under a CUDA graph (replay instances only: their steps have static shapes and no
host-side collectives), so launch overhead shows as graphs-off minus graphs-on step time.

The graph replays one decode step at fixed positions (the cache is rewritten in place each
replay); only whole-step 'step' records come out, marked cuda_graphs=true.
"""
from __future__ import annotations

import sys

import torch

from .model import Batch
from .records import step_records
from .step_shape import StepShape
from .timing import NullTimer


def graph_decode_records(loop) -> list[dict]:
    st = loop.decode_state
    ctx = st["ctx_next"]
    batch = Batch.decode(st["tokens"], ctx)
    model, timer = loop.model, NullTimer()
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            model.forward(batch, st["cache"], timer)  # warm-up on the side stream
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model.forward(batch, st["cache"], timer)
    except Exception as exc:  # noqa: BLE001 - report and go on with the eager records
        print(f"rank {loop.me.rank}: CUDA graph capture failed: {exc}", file=sys.stderr)
        return []
    out = []
    shape = StepShape.decode(ctx).with_extra(tokens_global=len(st["ctx"]) * loop.layout.dp,
                                             expert_tokens=loop.replay.expert_tokens(),
                                             budget=loop.layout.max_tokens_per_step,
                                             max_batch=loop.layout.max_batch_per_rank)
    for step in range(loop.me.cfg.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        sec = {"step": start.elapsed_time(end) / 1e3}
        out += step_records(loop.me.base, loop.role, loop.layout, step, sec, shape, loop.me.dtype_name,
                            loop.n_dense, loop.n_moe, cuda_graphs=True)
    return out
