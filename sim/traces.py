"""Public request traces, read as published: one small reader per format, plus format detection.

Formats (a Workload's `trace_format`; `auto` detects them from the suffix and the header):
- azure: Azure LLM inference traces 2023 and 2024 (Azure/AzurePublicDataset, AzureLLMInferenceDataset
  2023.md / 2024.md): CSV with TIMESTAMP, ContextTokens, GeneratedTokens. TIMESTAMP is a date-time,
  2023 "2023-11-16 18:15:46.6805900" (7 fractional digits, no zone), 2024
  "2024-05-10 00:00:00.009930+00:00" (UTC offset; whole seconds carry no fraction). A time without a
  zone is read as UTC.
- burstgpt: BurstGPT (HPMLL/BurstGPT release v1.1): CSV with Timestamp (seconds), Model, Request tokens,
  Response tokens, Total tokens, Log Type. Rows with 0 response tokens are failed requests (its README)
  and are skipped and counted.
- mooncake: Mooncake / Kimi (kvcache-ai/Mooncake, FAST25-release/traces): JSONL with timestamp (ms since
  the first request), input_length, output_length and hash_ids, one chained hash per block of 512
  prompt tokens (the last block may be partial), so equal leading ids mean a shared prefix.
- jsonl: plain JSONL with timestamp (seconds), input_length, output_length.
- vllm_bench: a `vllm bench serve --save-result --save-detailed` JSON; its input_lens and output_lens
  (vllm/benchmarks/serve.py) give per-request lengths, no arrival times. Failed requests (non-empty
  `errors` entry, or 0 output tokens) are skipped.

Auto-detection: .csv by its header (ContextTokens -> azure, Request tokens -> burstgpt); .jsonl with
hash_ids on its first record -> mooncake, else jsonl; .json -> vllm_bench. Every missing or malformed
column is a SpecError naming the file, its line and the column. CSV rows with 0 prompt tokens (nothing
to prefill) are skipped and counted; output lengths below 1 become 1 (a request emits at least its
first token).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional

import numpy as np

from rackplan.specs import SpecError, Workload, reading

MAX_TOKENS = 10**9  # no request has a billion tokens; larger counts are corrupt (and overflow int64 sums)
MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash_ids block in the published Mooncake traces (ceil(input/512) ids)
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
JSONL_KEYS = ("timestamp", "input_length", "output_length")
_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?")


@dataclass(frozen=True)
class Trace:
    """Requests of a trace file, sorted by arrival."""

    arrival_s: Optional[np.ndarray]  # [N] seconds since the first request; None: the format has no times
    isl: np.ndarray  # [N] prompt tokens
    osl: np.ndarray  # [N] output tokens (>= 1)
    blocks: Optional[tuple[tuple[int, ...], ...]] = None  # [N] block hashes of each prompt (hash_ids)
    block_size: int = 0  # prompt tokens per block (with blocks)
    skipped: int = 0  # rows the format marks as failed or empty

    def __len__(self) -> int:
        return len(self.isl)


def _key(name: str) -> str:
    """Column names compare without case, spaces or underscores ('Request tokens' == 'request_tokens')."""
    return re.sub(r"[\s_]", "", name).lower()


def _count(text, where: str, column: str, minimum: int = 0) -> int:
    """A token count: a whole number >= minimum (JSON ints or CSV text)."""
    try:
        if isinstance(text, bool):
            raise ValueError
        value = float(text)
        if not value.is_integer():
            raise ValueError
    except (TypeError, ValueError):
        raise SpecError(where, column, f"a whole number of tokens >= {minimum}", text) from None
    if not minimum <= value <= MAX_TOKENS:
        raise SpecError(where, column, f"a whole number of tokens in [{minimum}, {MAX_TOKENS:.0e}]", text)
    return int(value)


def _seconds(text, where: str, column: str, scale: float = 1.0) -> float:
    """A number of seconds (after `scale`), finite and >= 0."""
    try:
        if isinstance(text, bool):
            raise ValueError
        value = float(text) * scale
    except (TypeError, ValueError):
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise SpecError(where, column, "a finite number >= 0", text)
    return value


def azure_time(text: str, where: str = "", column: str = "TIMESTAMP") -> tuple[int, float]:
    """(whole seconds since the epoch, fraction of a second) of an Azure TIMESTAMP: any number of
    fractional digits, UTC without a zone. Kept apart so that sub-microsecond digits survive."""
    m = _TIME.fullmatch(str(text).strip())
    if not m:
        raise SpecError(where, column, "a date-time like 2023-11-16 18:15:46.6805900 or "
                        "2024-05-10 00:00:00.009930+00:00", text)
    date, hms, frac, zone = m.groups()
    zone = "+00:00" if zone in (None, "Z") else zone[:3] + ":" + zone[-2:]  # +HHMM -> +HH:MM (Python 3.10)
    try:
        base = datetime.fromisoformat(f"{date} {hms}{zone}")
    except ValueError:
        raise SpecError(where, column, "a valid calendar date-time", text) from None
    return int(base.timestamp()), (float("0." + frac) if frac else 0.0)


def _csv_rows(path: Path, columns: tuple[str, ...], fmt: str):
    """(where, row keyed by normalised column name) for each data row of a CSV with `columns`."""
    rows = reading.read_csv(path, f"{fmt} trace CSV")
    _, header = next(rows, (None, None))
    if not header:
        raise SpecError(str(path), "(header)", f"a {fmt} CSV header ({', '.join(columns)})")
    have = [_key(c) for c in header]
    for col in columns:
        if _key(col) not in have:
            raise SpecError(str(path), col, f"a column of the {fmt} CSV header ({', '.join(columns)})",
                            ",".join(header))
    for where, row in rows:
        yield where, dict(zip(have, row + [None] * (len(have) - len(row))))


def read_azure(path: Path, limit: Optional[int] = None) -> Trace:
    """Azure LLM inference trace 2023 / 2024 (CSV: TIMESTAMP, ContextTokens, GeneratedTokens)."""
    whole, frac, isl, osl, skipped = [], [], [], [], 0
    for where, row in _csv_rows(path, AZURE_COLUMNS, "Azure LLM inference"):
        if limit is not None and len(isl) >= limit:
            break
        sec, part = azure_time(row["timestamp"], where)
        n_in = _count(row["contexttokens"], where, "ContextTokens")
        n_out = _count(row["generatedtokens"], where, "GeneratedTokens")
        if n_in == 0:
            skipped += 1
            continue
        whole.append(sec)
        frac.append(part)
        isl.append(n_in)
        osl.append(n_out)
    times = (np.asarray(whole, dtype=np.int64) - min(whole, default=0)) + np.asarray(frac)
    return _sorted(path, times, isl, osl, skipped=skipped)


def read_burstgpt(path: Path, limit: Optional[int] = None) -> Trace:
    """BurstGPT (CSV: Timestamp in seconds, Model, Request tokens, Response tokens, Total tokens, Log Type)."""
    times, isl, osl, skipped = [], [], [], 0
    for where, row in _csv_rows(path, BURSTGPT_COLUMNS, "BurstGPT"):
        if limit is not None and len(isl) >= limit:
            break
        t = _seconds(row["timestamp"], where, "Timestamp")
        n_in = _count(row["requesttokens"], where, "Request tokens")
        n_out = _count(row["responsetokens"], where, "Response tokens")
        if n_in == 0 or n_out == 0:  # a failed request (0 response tokens) or an empty prompt
            skipped += 1
            continue
        times.append(t)
        isl.append(n_in)
        osl.append(n_out)
    return _sorted(path, times, isl, osl, skipped=skipped)


def _json_lines(path: Path, limit: Optional[int]):
    for n, (where, rec) in enumerate(reading.read_jsonl(path, "JSONL trace")):
        if limit is not None and n >= limit:
            return
        for key in JSONL_KEYS:
            if key not in rec:
                raise SpecError(where, key, "a value (missing)")
        yield where, rec


def read_jsonl(path: Path, limit: Optional[int] = None) -> Trace:
    """Plain JSONL: timestamp (seconds), input_length, output_length."""
    times, isl, osl = [], [], []
    for where, rec in _json_lines(path, limit):
        times.append(_seconds(rec["timestamp"], where, "timestamp"))
        isl.append(_count(rec["input_length"], where, "input_length", 1))
        osl.append(_count(rec["output_length"], where, "output_length"))
    return _sorted(path, times, isl, osl)


def read_mooncake(path: Path, limit: Optional[int] = None, block_size: Optional[int] = None) -> Trace:
    """Mooncake / Kimi JSONL: timestamp (ms), input_length, output_length, hash_ids (blocks of block_size)."""
    bs = block_size or MOONCAKE_BLOCK_TOKENS
    times, isl, osl, blocks = [], [], [], []
    for where, rec in _json_lines(path, limit):
        times.append(_seconds(rec["timestamp"], where, "timestamp", 1e-3))
        n_in = _count(rec["input_length"], where, "input_length", 1)
        isl.append(n_in)
        osl.append(_count(rec["output_length"], where, "output_length"))
        blocks.append(_hash_ids(rec.get("hash_ids"), where, n_in, bs))
    return _sorted(path, times, isl, osl, blocks, bs)


def _hash_ids(ids, where: str, isl: int, block_size: int) -> tuple[int, ...]:
    """A request's block hashes: a list of integers, at most one per block_size tokens of its prompt."""
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise SpecError(where, "hash_ids", "a list of integer block hashes", ids)
    most = -(-isl // block_size)
    if len(ids) > most:
        raise SpecError(where, "hash_ids", f"at most ceil(input_length / block_size) = {most} block hashes "
                        f"(block_size {block_size})", f"{len(ids)} hashes")
    return tuple(ids)


def read_vllm_bench(path: Path, limit: Optional[int] = None) -> Trace:
    """Per-request lengths of a `vllm bench serve --save-detailed` result (input_lens, output_lens)."""
    data = reading.read_json(path, "vllm bench serve result JSON", finite=False)
    lists = {}
    for key in ("input_lens", "output_lens"):
        val = data.get(key) if isinstance(data, dict) else None
        if not isinstance(val, list):
            raise SpecError(str(path), key, "a list of per-request token counts (vllm bench serve "
                            "--save-detailed)", "missing" if val is None else type(val).__name__)
        lists[key] = val
    if len(lists["input_lens"]) != len(lists["output_lens"]):
        raise SpecError(str(path), "output_lens", f"as many entries as input_lens ({len(lists['input_lens'])})",
                        len(lists["output_lens"]))
    errors = data.get("errors") or [""] * len(lists["input_lens"])
    isl, osl, skipped = [], [], 0
    for i, (n_in, n_out, err) in enumerate(zip(lists["input_lens"], lists["output_lens"], errors)):
        n_in = _count(n_in, f"{path}: input_lens[{i}]", "input_lens", 1)
        n_out = _count(n_out, f"{path}: output_lens[{i}]", "output_lens")
        if err or n_out == 0:  # a failed request
            skipped += 1
            continue
        isl.append(n_in)
        osl.append(n_out)
        if limit is not None and len(isl) >= limit:
            break
    if not isl:
        raise SpecError(str(path), "input_lens", "at least one successful request")
    return Trace(None, np.asarray(isl, dtype=np.int64), np.asarray(osl, dtype=np.int64), skipped=skipped)


def _sorted(path: Path, times, isl, osl, blocks=None, block_size: int = 0, skipped: int = 0) -> Trace:
    """Sort by arrival (stable), times from the first request, output lengths >= 1."""
    if len(times) == 0:
        raise SpecError(str(path), "(file)", "at least one request")
    t = np.asarray(times, dtype=float)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order[0]]
    isl_a = np.asarray(isl, dtype=np.int64)[order]
    osl_a = np.maximum(np.asarray(osl, dtype=np.int64)[order], 1)
    blocks_t = tuple(blocks[i] for i in order) if blocks is not None else None
    return Trace(t, isl_a, osl_a, blocks_t, block_size if blocks is not None else 0, skipped)


READERS = {"azure": read_azure, "burstgpt": read_burstgpt, "mooncake": read_mooncake, "jsonl": read_jsonl,
           "vllm_bench": read_vllm_bench}


def detect_format(path: Path) -> str:
    """The format of a trace file from its suffix and first line (see the module docstring)."""
    if path.suffix == ".json":
        return "vllm_bench"
    if path.suffix == ".csv":
        header = next(reading.read_csv(path, "trace CSV"), ("", []))[1]
        cols = {_key(c) for c in header}
        if "contexttokens" in cols:
            return "azure"
        if "requesttokens" in cols:
            return "burstgpt"
        raise SpecError(str(path), "(header)", f"an Azure LLM inference header ({', '.join(AZURE_COLUMNS)}) or a "
                        "BurstGPT header (Timestamp, Model, Request tokens, Response tokens, Total tokens, "
                        "Log Type)", ",".join(header))
    if path.suffix == ".jsonl":
        rec = next(reading.read_jsonl(path, "JSONL trace"), ("", {}))[1]
        return "mooncake" if isinstance(rec, dict) and "hash_ids" in rec else "jsonl"
    raise SpecError(str(path), "trace_format", "one of " + ", ".join(READERS) + " (auto knows .csv, .jsonl "
                    "and .json files)", path.suffix or "no suffix")


def read_trace(path: str | Path, fmt: str = "auto", limit: Optional[int] = None,
               block_size: Optional[int] = None) -> Trace:
    """Requests of a trace file: its first `limit` requests in file order, sorted by arrival."""
    path = Path(path)
    if not path.is_file():
        raise SpecError("", "trace", "an existing trace file (CSV, JSONL or vllm bench JSON)", str(path))
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt not in READERS:
        raise SpecError(str(path), "trace_format", "one of auto, " + ", ".join(READERS), fmt)
    if block_size is not None and fmt != "mooncake":
        raise SpecError(str(path), "block_size", f"unset: a {fmt} trace has no hash_ids", block_size)
    if fmt == "mooncake":
        return read_mooncake(path, limit, block_size)
    return READERS[fmt](path, limit)


def load_trace(wl: Workload, limit: Optional[int] = None) -> Trace:
    """The trace of a workload, read with its trace_format and block_size."""
    return read_trace(wl.trace, wl.trace_format, limit, wl.block_size)
