"""Whether a step runs as two micro-batches (dual-batch overlap), decided as vLLM decides it.

vLLM splits a step only when DBO is on, the instance has an all-to-all to overlap (EP > 1), and every
DP rank of the step has at least the threshold of tokens for its kind of step (`--dbo-decode-token-
threshold` on decode-only steps, `--dbo-prefill-token-threshold` with prompt tokens): the ranks agree,
since each micro-batch is its own pair of all-to-alls. The rule is the cost model's
(sim/cost/dbo.splits); here it takes the tokens every DP rank runs, which every rank of the step
knows alike (the serving tick's work, or gathered in benchmark mode), so all ranks decide the same.

The split itself is executor/parallel.moe_forward_dbo: both halves' dispatches are launched as
asynchronous all-to-alls (NCCL on CUDA; gloo's own thread on CPU) and each half's experts run while
the other half's tokens are in flight.
"""
from __future__ import annotations

from rackplan.sim.cost.batch import RankWork, Step
from rackplan.sim.cost.dbo import splits
from rackplan.specs import Layout


def dbo_splits(layout: Layout, rank_tokens: list[int], has_prefill: bool) -> bool:
    """Whether a step whose DP ranks run `rank_tokens` query tokens each (with prompt tokens on some
    rank: `has_prefill`) is split into two micro-batches."""
    works = tuple(RankWork(chunks=((1.0, float(t), 0.0),)) if has_prefill else RankWork(float(t)) for t in rank_tokens)
    return splits(layout, Step(works, (1,) * len(works)), 1.0)
