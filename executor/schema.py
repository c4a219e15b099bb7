"""measurements.jsonl: one JSON record per op per step per rank (no torch import here).

Op names equal the cost model's op names (sim/cost/step.py), so `validate` can compare them one
to one. "step" is the wall time of a whole step, "host" the host-side scheduling part (batch
preparation, metadata, sampling). Serving runs add "request" records with per-request latencies.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from rackplan.specs import SpecError
from rackplan.specs.ops import RECORD_OPS

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
        if tp is int and isinstance(val, bool):
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
    with path.open() as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                raise SpecError(f"{path}:{i}", "(line)", "one complete JSON object per line") from None
            validate_record(rec, f"{path}:{i}")
            records.append(rec)
    if not records:
        raise SpecError(str(path), "(file)", "at least one record")
    hashes = {r["plan_hash"] for r in records}
    if len(hashes) > 1:
        raise SpecError(str(path), "plan_hash", "records from one plan only", sorted(hashes))
    return records
