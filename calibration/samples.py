"""Measured steps as the cost model sees them: one RankBatch per step plus measured seconds per op.

Records of one step (all ranks) become a `StepSample`: per-rank decode batch and context, prefill
chunks, and per op the slowest rank's seconds (the cost model prices the slowest rank, an EP step
waits for it). Repeats of the same shape collapse to their medians, because the machine is shared
and single steps are noisy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.cost.step import RankBatch
from sim.specs import Layout, Plan, SpecError

DEVICE_OPS = ("attn.proj", "attn.core", "router", "moe.dispatch", "moe.experts", "moe.combine",
              "shared_expert", "dense_ffn", "lm_head")
CTX_BUCKET = 64  # tokens of mean context: decode steps of one sweep point differ only in context


@dataclass
class StepSample:
    """One step shape (medians over its repeats) on one instance role."""

    role: str  # prefill | decode
    size: int  # decode: sequences per rank; prefill: new tokens per rank (what sweeps vary)
    rb: RankBatch
    ops: dict[str, float]  # measured seconds per op (slowest rank)
    step_s: float
    host_s: float
    repeats: int = 1
    steps: list[int] = field(default_factory=list)


def layout_for(plan: Plan, role: str) -> Layout:
    """The instance layout a role's steps ran on."""
    pool = {"prefill": plan.prefill, "decode": plan.decode}.get(role) or plan.aggregated
    if not pool:
        raise SpecError(plan.name, role, "a layout for this role in the plan")
    return pool[0]


def step_samples(records: list[dict], plan: Plan) -> list[StepSample]:
    """Collapse measured records (not request records) into median step samples per shape."""
    by_step: dict[tuple, list[dict]] = {}
    for r in records:
        if r["op"] == "request" or r["source"] != "measured":
            continue
        by_step.setdefault((r["plan_hash"], r["role"], r["step"]), []).append(r)  # runs of a sweep
    raw = [s for s in (_one_step(role, step, recs, plan) for (_, role, step), recs in sorted(by_step.items()))
           if s is not None]
    groups: dict[tuple, list[StepSample]] = {}
    for s in raw:
        groups.setdefault(_shape_key(s), []).append(s)
    return [_median(g) for g in groups.values()]


def _one_step(role: str, step: int, recs: list[dict], plan: Plan) -> StepSample | None:
    if role == "serve":  # serving-mode steps: prefill if any rank ran prompt tokens
        role = "prefill" if any(r["shape"].get("prefill_new") for r in recs) else "decode"
    ranks = layout_for(plan, role).dp
    dec_b, dec_c = np.zeros(ranks), np.zeros(ranks)
    pre_new = [np.zeros(0) for _ in range(ranks)]
    pre_pre = [np.zeros(0) for _ in range(ranks)]
    ops: dict[str, float] = {}
    step_s = host_s = 0.0
    for r in recs:
        k, shp = r["rank"] % ranks, r["shape"]
        if r["op"] == "step":
            step_s = max(step_s, r["seconds"])
        elif r["op"] == "host":
            host_s = max(host_s, r["seconds"])
        else:
            ops[r["op"]] = max(ops.get(r["op"], 0.0), r["seconds"])
        if shp.get("prefill_new"):
            pre_new[k] = np.asarray(shp["prefill_new"], float)
            pre_pre[k] = np.asarray(shp.get("prefill_prefix") or [0] * len(shp["prefill_new"]), float)
        elif role == "decode" and "batch" in shp:
            dec_b[k], dec_c[k] = shp["batch"], shp.get("ctx_sum", 0)
    if step_s <= 0:
        return None  # a step without its wall time cannot be compared
    rb = RankBatch(dec_b, dec_c, pre_new, pre_pre) if role == "prefill" else RankBatch(dec_b, dec_c)
    size = int(max(float(np.sum(n)) for n in pre_new)) if role == "prefill" else int(np.max(dec_b))
    return StepSample(role, size, rb, ops, step_s, host_s, 1, [step])


def _shape_key(s: StepSample) -> tuple:
    if s.role == "prefill":
        return ("prefill", tuple(tuple(n.astype(int)) for n in s.rb.pre_new),
                tuple(tuple((p // CTX_BUCKET).astype(int)) for p in s.rb.pre_prefix))
    mean_ctx = s.rb.dec_ctx / np.maximum(s.rb.dec_batch, 1)
    return ("decode", tuple(s.rb.dec_batch.astype(int)), tuple((mean_ctx // CTX_BUCKET).astype(int)))


def _median(group: list[StepSample]) -> StepSample:
    first = group[0]
    if len(group) == 1:
        return first
    names = {n for s in group for n in s.ops}
    ops = {n: float(np.median([s.ops[n] for s in group if n in s.ops])) for n in names}
    rb = first.rb
    if first.role == "decode":
        rb = RankBatch(rb.dec_batch, np.median([s.rb.dec_ctx for s in group], axis=0))
    return StepSample(first.role, first.size, rb, ops, float(np.median([s.step_s for s in group])),
                      float(np.median([s.host_s for s in group])), len(group),
                      [n for s in group for n in s.steps])


def split_holdout(samples: list[StepSample], holdout: dict[str, set[int]]) -> tuple[list, list]:
    """(fit, held-out) by role and size: e.g. {"decode": {4, 12}} holds out decode batches 4 and 12."""
    held = [s for s in samples if s.size in holdout.get(s.role, set())]
    fit = [s for s in samples if s.size not in holdout.get(s.role, set())]
    return fit, held
