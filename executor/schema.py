"""measurements.jsonl: one JSON record per op per step per rank (no torch import here).

Op names equal the cost model's op names (sim/cost/step.py), so `validate` can compare them one
to one. "step" is the wall time of a whole step, "host" the host-side scheduling part (batch
preparation, metadata, sampling). Serving runs add "request" records with per-request latencies.
"""
from __future__ import annotations

import math
from pathlib import Path

from rackplan.specs import SpecError
from rackplan.specs.ops import RECORD_OPS
from rackplan.specs.reading import read_jsonl

from .step_shape import StepShape

SCHEMA_VERSION = 1
OPS = RECORD_OPS  # rackplan/specs/ops.py: the one op vocabulary
ROLES = ("prefill", "decode", "serve")
REQUIRED = {
    "schema": int, "plan_hash": str, "plan": str, "model": str, "hardware": str, "device": str,
    "versions": dict, "rank": int, "world_size": int, "role": str, "instance_dp": int, "ep": int,
    "step": int, "op": str, "layers": int, "shape": dict, "dtype": str, "seconds": float,
    "source": str, "cuda_graphs": bool,
}
REQUEST_FIELDS = ("ttft_s", "tpot_s", "e2e_s", "isl", "osl", "arrival_s")


def validate_record(rec: dict, where: str = "") -> None:
    """Raise SpecError naming the first field of `rec` that breaks the schema."""
    if not isinstance(rec, dict):
        raise SpecError(where, "(record)", "a JSON object", type(rec).__name__)
    for key, tp in REQUIRED.items():
        if key not in rec:
            raise SpecError(where, key, f"{tp.__name__} (missing)")
        val = rec[key]
        ok = isinstance(val, (int, float)) and not isinstance(val, bool) if tp is float else isinstance(val, tp)
        if tp is int and (isinstance(val, bool) or (isinstance(val, int) and abs(val) > 2**53)):
            ok = False
        if not ok:
            raise SpecError(where, key, f"a {tp.__name__}", val)
    if rec["schema"] != SCHEMA_VERSION:
        raise SpecError(where, "schema", f"schema version {SCHEMA_VERSION}", rec["schema"])
    if rec["op"] not in OPS:
        raise SpecError(where, "op", "one of " + ", ".join(OPS), rec["op"])
    if rec["role"] not in ROLES:
        raise SpecError(where, "role", "one of " + ", ".join(ROLES), rec["role"])
    if rec["source"] not in ("measured", "modelled"):
        raise SpecError(where, "source", "'measured' or 'modelled'", rec["source"])
    sec = float(rec["seconds"])
    if not math.isfinite(sec) or sec < 0:
        raise SpecError(where, "seconds", "a finite number >= 0", rec["seconds"])
    if not 0 <= rec["rank"] < rec["world_size"]:
        raise SpecError(where, "rank", f"0..world_size-1 ({rec['world_size'] - 1})", rec["rank"])
    for key, lo in (("world_size", 1), ("instance_dp", 1), ("ep", 1), ("step", 0), ("layers", 0)):
        if rec[key] < lo:
            raise SpecError(where, key, f"an integer >= {lo}", rec[key])
    if not isinstance(rec["shape"], dict):
        raise SpecError(where, "shape", "a mapping", rec["shape"])
    if rec["role"] != "serve":  # a prefill / decode step's shape (executor/step_shape.py)
        StepShape.from_record(rec["shape"], where)
    for key, val in rec["shape"].items() if rec["op"] != "request" else ():
        for v in (val if isinstance(val, list) else [val]):
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
                raise SpecError(where, f"shape.{key}", "counts >= 0", val)
    if rec["op"] == "request":
        for key in REQUEST_FIELDS:
            v = rec.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise SpecError(where, key, "a finite number >= 0 on a request record", v)


def read_measurements(path: str | Path) -> list[dict]:
    """Read and validate a measurements.jsonl (or a folder holding one); SpecError on any bad line
    (corrupt or truncated JSON, schema breaks) or on records from different plans mixed."""
    path = Path(path)
    if path.is_dir():
        path = path / "measurements.jsonl"
    if not path.is_file():
        raise SpecError(str(path), "(file)", "an existing measurements.jsonl")
    records = []
    for where, rec in read_jsonl(path, "measurements.jsonl"):
        validate_record(rec, where)
        records.append(rec)
    if not records:
        raise SpecError(str(path), "(file)", "at least one record")
    hashes = {r["plan_hash"] for r in records}
    if len(hashes) > 1:
        raise SpecError(str(path), "plan_hash", "records from one plan only", sorted(hashes))
    check_whole_steps(records, str(path))
    return records


def _series(rec: dict) -> tuple:
    return rec["rank"], rec["role"], rec["shape"].get("instance"), rec["instance_dp"], rec["ep"], rec["cuda_graphs"]


def check_whole_steps(records: list[dict], where: str) -> None:
    """Every benchmark step of every rank has its 'step' record, and the last step in the file has
    the ops that sort after 'step' (records of a step are written sorted by op) that the step
    before it on the same rank had: a file cut between records (a run killed while writing, a
    truncated copy) is refused instead of fitted."""
    ops: dict[tuple, set] = {}
    order: list[tuple] = []
    for r in records:
        if r["role"] == "serve":  # serving records (requests, KV transfers) have no per-step set
            continue
        key = _series(r) + (r["step"],)
        if key not in ops:
            ops[key] = set()
            order.append(key)
        ops[key].add(r["op"])
    for key in order:
        if "step" not in ops[key]:
            raise SpecError(where, "step", f"a 'step' record for step {key[-1]} of rank {key[0]} ({key[1]}): "
                            "the file ends inside a step (truncated?)")
    if len(order) > 1:
        last = order[-1]
        prev = next((k for k in reversed(order[:-1]) if k[:-1] == last[:-1]), None)
        after = {op for op in ops[prev] if op > "step"} if prev is not None else set()  # written after 'step'
        if after - ops[last]:
            missing = ", ".join(sorted(after - ops[last]))
            raise SpecError(where, "step", f"every op of step {last[-1]} of rank {last[0]} ({last[1]}), missing "
                            f"{missing}: the file ends inside a step (truncated?)")
