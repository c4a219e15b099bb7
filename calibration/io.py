"""Calibration inputs and provenance: measurements.jsonl, `vllm bench serve` results, reference tables.

Every reader turns bad input into one SpecError naming the file and field, so `calibrate` and
`validate` can print one line and exit 2 before anything is written.
"""
from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import json
import math
import platform
from pathlib import Path

from rackplan.specs import SpecError

DATA_DIR = Path(__file__).resolve().parent / "data"


def file_sha256(path: str | Path) -> str:
    """Short content hash of a file (provenance)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def read_measurements(path: str | Path) -> list[dict]:
    """Validated measurement records (executor/schema.py) from a file or run folder."""
    from rackplan.executor.schema import read_measurements as _read

    return _read(path)


def measurement_file(path: str | Path) -> Path:
    p = Path(path)
    return p / "measurements.jsonl" if p.is_dir() else p


def read_table(path: str | Path) -> list[dict]:
    """Rows of a reference CSV ('#' lines are comments naming the source); numbers become floats."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(str(path), "(file)", "an existing CSV table")
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    rows = []
    for i, row in enumerate(csv.DictReader(lines), 1):
        out = {}
        for key, val in row.items():
            if key is None or val is None:
                raise SpecError(f"{path}:row {i}", "(columns)", "as many values as header columns")
            out[key] = _number(val)
        rows.append(out)
    if not rows:
        raise SpecError(str(path), "(file)", "at least one data row")
    return rows


def _number(text: str):
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def read_vllm_bench(path: str | Path) -> dict:
    """Summary of a `vllm bench serve --save-result` JSON: throughput, TTFT and TPOT (seconds), the
    load (request rate or max concurrency) and whatever serving flags were saved beside it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        raise SpecError(str(path), "(file)", "a vllm bench serve result JSON") from None
    out = {"source": str(path), "sha256": file_sha256(path)}
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        out[key] = _finite(data, key, path, required=key == "output_throughput")
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "p90", "p99"):
            v = _finite(data, f"{stat}_{metric}_ms", path)
            if v is not None:
                out[f"{metric}_{stat}_s"] = v / 1e3
    for key in ("request_rate", "max_concurrency", "num_prompts", "completed", "model_id", "backend",
                "total_input_tokens", "total_output_tokens", "burstiness"):
        if key in data:
            out[key] = data[key]
    # --save-detailed: per-request input_lens / output_lens (calibration/bench_workload.py replays them)
    out["detailed"] = isinstance(data.get("input_lens"), list) and isinstance(data.get("output_lens"), list)
    out["flags"] = {k: v for k, v in data.items() if k in ("serving_flags", "server_args", "metadata")}
    return out


def _finite(data: dict, key: str, path: Path, required: bool = False):
    if key not in data:
        if required:
            raise SpecError(str(path), key, "a number (missing)")
        return None
    v = data[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SpecError(str(path), key, "a finite number >= 0", v)
    return float(v)


def software_versions() -> dict[str, str]:
    """Versions that decide measured times (torch imported only if already loaded or installed)."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("torch", "numpy", "scipy", "triton"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def provenance(inputs: list[str | Path], **extra) -> dict:
    """Input files with their hashes, software versions, host and date."""
    files = [{"path": str(p), "sha256": file_sha256(p)} for p in inputs]
    return {"inputs": files, "versions": software_versions(), "host": platform.node() or "unknown",
            "machine": platform.machine(), "date": _dt.date.today().isoformat(), **extra}


def read_runs(paths: list[str | Path], plan) -> list[dict]:
    """Records of several runs of `plan` or of sweep variants of it (same model, hardware and
    instance shapes, other batch limits). Each file holds one plan (read_measurements checks);
    a file from another model, hardware or instance shape is an error. Each record gets `_run`,
    the index of its file, so that steps of repeated runs stay apart."""
    out = []
    shapes = {(lay.role, lay.dp, lay.ep_size) for lay in plan.prefill + plan.decode + plan.aggregated}
    for i, p in enumerate(paths):
        recs = read_measurements(p)
        first = recs[0]
        if (first["model"], first["hardware"]) != (plan.model, plan.hardware):
            raise SpecError(str(p), "plan", f"runs of {plan.model} on {plan.hardware} (plan {plan.name})",
                            f"{first['model']} on {first['hardware']}")
        for r in recs:
            role = r["role"] if r["role"] != "serve" else None
            if role and not any(s[0] in (role, "both") and s[1:] == (r["instance_dp"], r["ep"]) for s in shapes):
                raise SpecError(str(p), "instance_dp", f"an instance shape of plan {plan.name}",
                                f"{role} dp={r['instance_dp']} ep={r['ep']}")
        out += [dict(r, _run=i) for r in recs]  # step numbers restart in every run
    return out
