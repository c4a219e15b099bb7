"""Synthetic measurements.jsonl from the cost model itself: a known "true" profile, per-op
distortions and seeded noise, in the executor's schema. Tests use it to check that fits recover
what generated the data, and to produce bad inputs on purpose.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rackplan.executor.schema import SCHEMA_VERSION
from rackplan.executor.step_shape import StepShape
from rackplan.sim.cost.step import CostContext, RankBatch, step_cost
from rackplan.specs import Plan, Profile, load_hardware, load_model, plan_hash

from .samples import IN_STEP_PARTS, layout_for


def _record(plan: Plan, phash: str, role: str, step: int, rank: int, ranks: int, op: str, seconds: float,
            shape: dict, layers: int = 1) -> dict:
    """One record; phash = plan_hash(plan), taken once per sweep (a YAML dump of the plan: ~10 ms a call)."""
    return {"schema": SCHEMA_VERSION, "plan_hash": phash, "plan": plan.name, "model": plan.model,
            "hardware": plan.hardware, "device": "cpu", "versions": {"torch": "synthetic"}, "rank": rank,
            "world_size": ranks, "role": role, "instance_dp": ranks, "ep": ranks, "step": step, "op": op,
            "layers": layers, "shape": shape, "dtype": "fp32", "seconds": float(seconds), "source": "measured",
            "cuda_graphs": False}


def synth_records(plan: Plan, prof: Profile, decode_batches=(1, 2, 4, 8, 16), prefill_tokens=(32, 64, 128, 256),
                  repeats: int = 3, noise: float = 0.02, op_distort: dict | None = None, seed: int = 0) -> list[dict]:
    """Records of a sweep: decode steps at each batch (context 64 per sequence) and prefill steps of
    one chunk per rank, priced by `prof`, each op times `op_distort[op]` and lognormal noise."""
    rng = np.random.default_rng(seed)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    out, step, phash = [], 0, plan_hash(plan)
    shapes = [("decode", b) for b in decode_batches] + [("prefill", t) for t in prefill_tokens]
    for role, size in shapes:
        lay = layout_for(plan, role)
        r = lay.dp
        for _ in range(repeats):
            if role == "decode":
                rb = RankBatch(np.full(r, float(size)), np.full(r, 64.0 * size))
                shape = StepShape.decode([63] * size).to_record()  # 64 tokens of context each
            else:
                rb = RankBatch(np.zeros(r), np.zeros(r), [np.array([float(size)])] * r, [np.zeros(1)] * r)
                shape = StepShape.prefill([size]).to_record()
            cost = step_cost(CostContext(model, hw, lay, prof), rb)
            wiggle = lambda: float(np.exp(rng.normal(0.0, noise)))  # noqa: E731
            total = 0.0
            ops = cost.breakdown()  # device ops; the host part a benchmark step runs (IN_STEP_PARTS)
            ops["host.exposed"] = cost.host.step_with(IN_STEP_PARTS) - cost.host.gpu_s
            for name, sec in ops.items():
                sec = sec * (op_distort or {}).get(name, 1.0) * wiggle()
                total += sec
                op = "host" if name == "host.exposed" else name
                for rank in range(r):
                    out.append(_record(plan, phash, role, step, rank, r, op, sec, shape))
            for rank in range(r):
                out.append(_record(plan, phash, role, step, rank, r, "step", total, shape))
            step += 1
    return out


def write_jsonl(records: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
