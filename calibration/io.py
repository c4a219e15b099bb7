"""Calibration inputs and provenance: measurements.jsonl, `vllm bench serve` results, reference tables.

Every reader turns bad input into one SpecError naming the file and field, so `calibrate` and
`validate` can print one line and exit 2 before anything is written.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import math
import platform
from pathlib import Path

from rackplan.specs import SpecError
from rackplan.specs.reading import number, read_csv, read_json

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
    rows, header = [], None
    for where, cells in read_csv(path, "CSV table", comments=True):
        if header is None:
            header = [c.strip() for c in cells]
            continue
        if len(cells) != len(header):
            raise SpecError(where, "(columns)", f"as many values as header columns ({len(header)})", len(cells))
        rows.append({k: _number(v) for k, v in zip(header, cells)})
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
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text  # 'inf' / 'nan' stay text: a number field refuses them


BENCH_COUNTS = ("num_prompts", "completed", "failed", "total_input_tokens", "total_output_tokens")


def read_vllm_bench(path: str | Path) -> dict:
    """Summary of a `vllm bench serve --save-result` JSON: throughput, TTFT and TPOT (seconds), the
    load (request rate or max concurrency) and whatever serving flags were saved beside it."""
    path = Path(path)
    data = bench_json(path)
    out = {"source": str(path), "sha256": file_sha256(path)}
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        out[key] = _finite(data, key, path, required=key == "output_throughput")
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "p90", "p99"):
            v = _finite(data, f"{stat}_{metric}_ms", path)
            if v is not None:
                out[f"{metric}_{stat}_s"] = v / 1e3
    for key in BENCH_COUNTS:
        if data.get(key) is not None:
            number(data[key], str(path), key, lo=0, integer=True)
    if data.get("max_concurrency") is not None:
        number(data["max_concurrency"], str(path), "max_concurrency", lo=1, integer=True)
    rate = data.get("request_rate")
    if rate is not None and rate != "inf" and not (isinstance(rate, float) and rate == math.inf):
        number(rate, str(path), "request_rate", lo=0, lo_open=True)
    for key in ("request_rate", "max_concurrency", "num_prompts", "completed", "model_id", "backend",
                "total_input_tokens", "total_output_tokens", "burstiness"):
        if key in data:
            out[key] = data[key]
    # --save-detailed: per-request input_lens / output_lens (calibration/bench_workload.py replays them)
    out["detailed"] = isinstance(data.get("input_lens"), list) and isinstance(data.get("output_lens"), list)
    out["flags"] = {k: v for k, v in data.items() if k in ("serving_flags", "server_args", "metadata")}
    return out


def bench_json(path: str | Path) -> dict:
    """The JSON object of a vllm bench serve result (an unthrottled run's request_rate may be inf)."""
    data = read_json(path, "vllm bench serve result JSON", finite=False)
    if not isinstance(data, dict):
        raise SpecError(str(path), "(top level)", "a vllm bench serve result (a JSON object)", type(data).__name__)
    return data


def _finite(data: dict, key: str, path: Path, required: bool = False):
    if key not in data:
        if required:
            raise SpecError(str(path), key, "a number (missing)")
        return None
    return number(data[key], str(path), key, lo=0)


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


def utc_date() -> str:
    """Today's date in UTC (YYYY-MM-DD), as every profile's provenance records it: the machine's time zone
    would date the same fit a day apart (TZ=Pacific/Kiritimati, benchmarks/RESULTS.md 2026-12-02 "same
    inputs, same report")."""
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


def provenance(inputs: list[str | Path], **extra) -> dict:
    """Input files with their hashes, software versions, host and date."""
    files = [{"path": str(p), "sha256": file_sha256(p)} for p in inputs]
    return {"inputs": files, "versions": software_versions(), "host": platform.node() or "unknown",
            "machine": platform.machine(), "date": utc_date(), **extra}


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
