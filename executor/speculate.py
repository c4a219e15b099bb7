"""Speculative decoding on the executor: a draft step proposes `depth` tokens per sequence, one
verify step runs 1 + depth tokens per sequence through the target model (Batch.verify), and each
sequence emits 1 + accepted tokens (its accepted drafts and the target's token after them).

Acceptance is drawn, not computed. With random weights the drafter and the target agree on a
token about 1 / vocab of the time, so greedy verification would accept nothing and every plan
would run at acceptance length 1. Instead each draft is kept with a configurable probability
(default: the rate that gives the plan's `acceptance_length`, see `acceptance_rate`), up to the
first rejection, from a seeded generator. The work per step (draft passes, 1 + depth verify
tokens) is exactly the plan's; the records carry the drawn and the greedy acceptance so nobody
reads the drawn figure as a property of the model.

The drafter is built from the spec's own shapes (one dense layer with the model's attention, its
own KV cache, the shared vocabulary): kind "mtp" runs it once per draft token (DeepSeek MTP),
kind "draft_model" runs `forward_passes` passes over the whole block (a block drafter such as
DSpark). Its parameter count is the tiny layer's, not DraftSpec.active_params.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from .attention import sub_seed
from .model import Batch, Model
from .timing import NullTimer


def acceptance_rate(depth: int, acceptance_length: float) -> float:
    """Per-draft acceptance probability r with 1 + r + ... + r^depth = acceptance_length (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(depth + 1)) < acceptance_length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def draw_accepted(rng: np.random.Generator, n_seqs: int, depth: int, rate: float) -> list[int]:
    """Accepted drafts per sequence: leading successes of `depth` Bernoulli(rate) draws."""
    keep = rng.random((n_seqs, depth)) < rate  # [B, depth]
    return [int(np.argmin(row)) if not row.all() else depth for row in keep]


def drafter_spec(spec):
    """One dense layer of the model's own shapes (width of its dense FFN, or of the experts a token
    reads when the model has no dense layer)."""
    m = spec.moe
    inter = spec.dense_intermediate or m.expert_intermediate * (m.top_k + m.num_shared_experts)
    return dataclasses.replace(spec, name=f"{spec.name}-drafter", num_layers=1, num_dense_layers=1,
                               dense_intermediate=inter, prefill_layers=None, draft=None)


class Drafter:
    """Proposes `depth` draft tokens per sequence for `kind` ('mtp' or 'draft_model')."""

    def __init__(self, spec, kind: str, depth: int, passes: int, seed: int, device: str, dtype,
                 slots: int, max_ctx: int):
        self.kind, self.depth, self.passes = kind, depth, passes
        self.model = Model(drafter_spec(spec), sub_seed(seed, "drafter"), device, dtype, None, [0])
        self.cache = self.model.kv_cache(slots, max_ctx)

    def propose(self, last: torch.Tensor, ctx: list[int], slots, timer) -> torch.Tensor:
        """last [B] tokens at positions ctx -> drafts [B, depth] (timed as one 'draft' op)."""
        null = NullTimer()
        with timer.section("draft"):
            if self.kind == "mtp":
                tok, out = last, []
                for j in range(self.depth):
                    tok = self.model.forward(Batch.decode(tok, [c + j for c in ctx], slots), self.cache,
                                             null).argmax(-1)
                    out.append(tok)
                return torch.stack(out, 1) if out else last.new_zeros(len(ctx), 0)
            block = last.repeat_interleave(self.depth)  # [B * depth]: the block starts as copies
            for _ in range(self.passes):
                block = self.model.forward(Batch.verify(block, ctx, self.depth, slots), self.cache, null).argmax(-1)
            return block.view(len(ctx), self.depth)


@dataclasses.dataclass
class Speculation:
    """What one verify step decided: emitted tokens per sequence and the acceptance counts."""

    emitted: list[list[int]]  # per sequence: accepted drafts + the target's next token
    accepted: int  # drafts kept (drawn)
    greedy: int  # drafts the target's greedy choice agreed with (what real verification keeps)

    @property
    def next_tokens(self) -> list[int]:
        return [e[-1] for e in self.emitted]


def verify_batch(last: torch.Tensor, drafts: torch.Tensor, ctx: list[int], slots) -> Batch:
    """The target's verify step: [last, drafts...] per sequence at positions ctx .. ctx + depth."""
    block = torch.cat([last[:, None], drafts], 1).reshape(-1)  # [B * (1 + depth)]
    return Batch.verify(block, ctx, drafts.shape[1] + 1, slots)


def accept(logits: torch.Tensor, drafts: torch.Tensor, accepted: list[int]) -> Speculation:
    """Emit accepted[i] drafts of sequence i, then the target's token after them.
    logits [B * (1 + depth), V], drafts [B, depth]."""
    b, d = drafts.shape
    target = logits.argmax(-1).view(b, d + 1).tolist()  # [B, 1 + depth]
    dr = drafts.tolist()
    emitted = [dr[i][:a] + [target[i][a]] for i, a in enumerate(accepted)]
    greedy = sum(next((j for j in range(d) if dr[i][j] != target[i][j]), d) for i in range(b))
    return Speculation(emitted, sum(accepted), greedy)
