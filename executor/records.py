"""Measurement records (executor/schema.py), the stdout summary table, and the atomic write.

A step's shape is an executor/step_shape.StepShape (per layer of one step on one rank: batch,
tokens, ctx_sum, prefill chunks; extras such as tokens_global, the tokens over the EP group, and
expert_tokens, the token-expert pairs this rank's routed experts computed per MoE layer).
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path

from rackplan.specs.ops import op_layers

from .schema import SCHEMA_VERSION
from .step_shape import StepShape


def base_record(plan, plan_hash: str, device_name: str, versions: dict, rank: int, world: int) -> dict:
    return {"schema": SCHEMA_VERSION, "plan_hash": plan_hash, "plan": plan.name, "model": plan.model,
            "hardware": plan.hardware, "device": device_name, "versions": versions, "rank": rank,
            "world_size": world}


def step_records(base: dict, role: str, layout, step: int, seconds: dict, shape: StepShape, dtype: str,
                 n_dense: int, n_moe: int, modelled: tuple = (), cuda_graphs: bool = False) -> list[dict]:
    """One record per op of one step, each carrying the step's shape; ops in `modelled` carry source
    'modelled'. The one place a step is recorded (benchmark, serving and CUDA-graph steps)."""
    out, shape = [], shape.to_record()
    for op, sec in sorted(seconds.items()):
        out.append(dict(base, role=role, instance_dp=layout.dp, ep=layout.ep_size, step=step, op=op,
                        layers=op_layers(op, n_dense, n_moe), shape=shape, dtype=dtype, seconds=float(sec),
                        source="modelled" if op in modelled else "measured", cuda_graphs=cuda_graphs))
    return out


def request_record(base: dict, rid: int, t, isl: int, osl: int, cached: int, layout, n_layers: int, dtype: str,
                   time_shared: bool, extra: dict) -> dict:
    """A request's record from its Timeline t (seconds from the run start): op 'request', role
    'serve', on its decode rank; TPOT over the osl - 1 tokens after the first."""
    ttft, e2e = t.first_token - t.arrival, t.finish - t.arrival
    tpot = (t.finish - t.first_token) / (osl - 1) if osl > 1 else 0.0
    shape = {"isl": isl, "osl": osl, "cached": cached, "prefill_rank": t.prefill_rank, "decode_rank": t.decode_rank,
             "time_shared": time_shared}
    return dict(base, rank=max(t.decode_rank, 0), role="serve", instance_dp=layout.dp, ep=layout.ep_size, step=rid,
                op="request", layers=n_layers, shape=shape, dtype=dtype, seconds=e2e, source="measured",
                cuda_graphs=False, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, isl=isl, osl=osl, arrival_s=t.arrival,
                queue_s=t.prefill_start - t.arrival, prefill_done_s=t.prefill_done, first_token_s=t.first_token,
                finish_s=t.finish, **{"kv_transfer_s": t.kv_transfer_s, **extra})


def write_jsonl(records: list[dict], path: Path) -> None:
    """Write all records at once: temp file + rename, so a failed run leaves nothing partial."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    from rackplan.outputs import umask_mode
    os.fchmod(fd, umask_mode())  # mkstemp's 0600 would survive the rename
    try:
        with os.fdopen(fd, "w") as fh:
            for rec in records:
                fh.write(json.dumps(rec, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def summary_table(records: list[dict]) -> str:
    """Mean milliseconds per step per op (over steps, mean over ranks), per role."""
    acc: dict = defaultdict(list)
    for r in records:
        if r["op"] != "request":
            acc[(r["role"], r["ep"], r["cuda_graphs"], r["op"])].append(r)
    lines = [f"{'role':8} {'ep':>4} {'graphs':>6} {'op':14} {'ms/step':>9} {'ms/layer':>9} {'n':>4}  source"]
    for (role, ep, graphs, op), rs in sorted(acc.items()):
        ms = 1e3 * sum(r["seconds"] for r in rs) / len(rs)
        per_layer = ms / max(rs[0]["layers"], 1)
        src = "/".join(sorted({r["source"] for r in rs}))
        lines.append(f"{role:8} {ep:>4} {str(graphs):>6} {op:14} {ms:9.3f} {per_layer:9.3f} {len(rs):>4}  {src}")
    reqs = [r for r in records if r["op"] == "request"]
    if reqs:
        ms = {key: sorted(1e3 * r[key] for r in reqs) for key in ("ttft_s", "tpot_s", "e2e_s")}
        pct = lambda vals, q: vals[min(len(vals) - 1, int(q * len(vals)))]  # nearest rank
        lines.append(f"requests {len(reqs)}: " + ", ".join(
            f"{key[:-2].upper()} p50 {pct(v, 0.5):.1f} ms p90 {pct(v, 0.9):.1f} ms" for key, v in ms.items()))
    return "\n".join(lines)
