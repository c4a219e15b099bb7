"""The public per-op database of aiconfigurator-core: finding its tables and reading them.

What every table measures, its units and which rackplan op class it prices is written down once, in
calibration/opdb.md (the mapping); TABLES below lists the columns each table must have. Layout:
`aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/<table>.parquet`; `latency` is
milliseconds per call except in moe_a2a_perf (microseconds).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rackplan.specs import SpecError

PACKAGE = "aiconfigurator-core"
# table -> (op folder, columns it must have)
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemm_perf": ("gemm", ("kernel_source", "gemm_dtype", "m", "n", "k", "latency")),
    "moe_perf": ("moe", ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
                         "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency")),
    "context_attention_perf": ("attention", ("kernel_source", "batch_size", "isl", "num_heads",
                                             "num_key_value_heads", "head_dim", "kv_cache_dtype", "window_size",
                                             "latency")),
    "generation_attention_perf": ("attention", ("kernel_source", "batch_size", "step", "num_heads",
                                                "num_key_value_heads", "head_dim", "kv_cache_dtype",
                                                "window_size", "latency")),
    "mla_context_module_perf": ("mla", ("kernel_source", "model", "mla_dtype", "kv_cache_dtype", "gemm_type",
                                        "num_heads", "batch_size", "isl", "latency")),
    "mla_generation_module_perf": ("mla", ("kernel_source", "model", "mla_dtype", "kv_cache_dtype", "gemm_type",
                                           "num_heads", "batch_size", "step", "latency")),
    "custom_allreduce_perf": ("comm", ("num_gpus", "message_size", "backend", "latency")),
    "moe_a2a_perf": ("comm", ("comm_backend", "phase", "ep_size", "node_num", "hidden_size", "topk",
                              "num_experts", "num_tokens", "latency")),
    "scale_matrix_perf": ("quantize", ("m", "k", "quant_dtype", "latency")),
    "mhc_module_perf": ("mhc", ("op_name", "num_tokens", "hc_mult", "hidden_size", "latency")),
}
# per-kernel tables read in place of a module table's residual (calibration/opdb_import.py PER_KERNEL_SOURCE), from
# another framework's tables of the same system: located on request (locate's `names`), not among TABLES
KERNEL_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "context_mla_perf": ("mla", ("kernel_source", "mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl",
                                 "step", "latency")),
    # SGLang's DeepEP MoE cores (calibration/opdb_ops.py deepep_expert_rows): DeepGEMM's grouped GEMMs behind DeepEP's
    # normal (context) and low-latency (generation) dispatch
    "wideep_context_moe_perf": ("moe", TABLES["moe_perf"][1]),
    "wideep_generation_moe_perf": ("moe", TABLES["moe_perf"][1]),
}
SECONDS_PER_UNIT = {"moe_a2a_perf": 1e-6}  # latency units: ms unless listed here
# columns read where a table has them, with the value assumed where it does not: the mHC collector
# (aiconfigurator collector/vllm/collect_mhc_module.py, MHC_NUM_SITES = 2) times the kernel of every
# hyper-connection site of a layer in one CUDA graph and says how many in num_sites
OPTIONAL: dict[str, dict[str, float]] = {"mhc_module_perf": {"num_sites": 1.0}}

FRAMEWORK = "vllm"  # the op-database tables read when --framework is not given
# the column whose values split a table into op classes (calibration/opdb_ops.py fits one class per value):
# a value none of whose rows has a finite positive latency is a class the tables claim but cannot give
CLASS_COLUMN = {"gemm_perf": "gemm_dtype", "moe_perf": "moe_dtype", "context_attention_perf": "kv_cache_dtype",
                "generation_attention_perf": "kv_cache_dtype", "mla_context_module_perf": "mla_dtype",
                "mla_generation_module_perf": "mla_dtype", "custom_allreduce_perf": "num_gpus",
                "moe_a2a_perf": "comm_backend", "scale_matrix_perf": "quant_dtype", "mhc_module_perf": "op_name"}


@dataclass(frozen=True)
class Table:
    """One table found for a system/framework: the version it comes from and its file."""

    name: str
    op: str
    version: str
    path: Path
    reused_from: str = ""  # version whose file a reuse.yaml declares this one identical to


def add_table_arguments(p, system_help: str) -> None:
    """The flags that name op-database tables (`calibrate --op-database`, `validate --op-database`), in one place."""
    p.add_argument("--op-database", metavar="SYSTEM", help=system_help)
    p.add_argument("--framework", help=f"framework of the op-database tables (default: {FRAMEWORK})")
    p.add_argument("--version", help="framework version (default: the newest that has each table)")
    p.add_argument("--op-database-root", metavar="PATH",
                   help="folder laid out as <system>/<op>/<framework>/<version>/ (default: the installed package's)")


def data_root(root: str | Path | None = None) -> Path:
    """The database folder: `root` if given, else the installed package's systems/data (found
    without importing the package, whose compiled engine rackplan does not need)."""
    if root is not None:
        path = Path(root)
        if not path.is_dir():
            raise SpecError("--op-database-root", "path", "an existing folder of <system>/<op>/...", str(root))
        return path
    from importlib.util import find_spec

    spec = find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise SpecError("--op-database", PACKAGE, "the package installed (pip install 'rackplan[opdb]') "
                        "or --op-database-root PATH")
    return Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"


def version_key(v: str) -> tuple:
    """Sort key for versions like 0.24.0, 1.3.0rc20, 0.1.dev19262 (numbers compared as numbers); versions
    whose numbers tie (1.3.0rc1, 1.3.0.dev1) by their name, so no directory listing's order picks one."""
    return tuple(int(x) if x.isdigit() else -1 for x in re.findall(r"\d+|[a-z]+", v)), v


def _versions(folder: Path) -> list[str]:
    return sorted((p.name for p in folder.iterdir() if p.is_dir()), key=version_key) if folder.is_dir() else []


def locate(root: Path, system: str, framework: str = "vllm", version: str | None = None,
           names: dict | None = None) -> dict[str, Table]:
    """The tables of TABLES (or of `names`, e.g. KERNEL_TABLES) present for `system` and `framework`, each from
    the newest version that has it (at most `version` when given). Unknown system, framework or version is a
    SpecError."""
    names = TABLES if names is None else names
    systems = sorted(p.name for p in root.iterdir() if p.is_dir())
    if system not in systems:
        raise SpecError("--op-database", "system", "one of: " + ", ".join(systems), system)
    ops = sorted({op for op, _ in names.values()})
    have = {op: _versions(root / system / op / framework) for op in ops}
    if not any(have.values()):
        fws = sorted({p.name for op in ops if (root / system / op).is_dir() for p in (root / system / op).iterdir()})
        raise SpecError(f"--op-database {system}", "framework", "one of: " + ", ".join(fws), framework)
    every = sorted({v for vs in have.values() for v in vs}, key=version_key)
    if version is not None and version not in every:
        raise SpecError(f"--op-database {system} --framework {framework}", "version",
                        "one of: " + ", ".join(every), version)
    found = {}
    for name, (op, _) in names.items():
        for v in reversed(have[op]):
            if version is not None and version_key(v) > version_key(version):
                continue
            table = _table_at(root / system / op / framework, v, name, op)
            if table is not None:
                found[name] = table
                break
    return found


def _table_at(folder: Path, version: str, name: str, op: str) -> Table | None:
    """The table file at one version, following a reuse.yaml declaration to the version it names."""
    path = folder / version / f"{name}.parquet"
    if path.is_file():
        return Table(name, op, version, path)
    reuse = folder / version / "reuse.yaml"
    if reuse.is_file():
        for item in reuse_entries(reuse):
            src = folder / item["from_version"] / f"{name}.parquet"
            if item["table"] == name and src.is_file():
                return Table(name, op, version, src, reused_from=item["from_version"])
    return None


def reuse_entries(path: Path) -> list[dict[str, str]]:
    """A reuse.yaml's declarations, `reuse: [{table: NAME, from_version: VERSION, ...}, ...]` (the
    aiconfigurator-core schema); anything else is a SpecError naming the file and the entry."""
    from rackplan.specs.reading import read_yaml

    items = read_yaml(path).get("reuse")
    if items is None:
        return []
    if not isinstance(items, list):
        raise SpecError(str(path), "reuse", "a list of {table, from_version} mappings", type(items).__name__)
    for i, item in enumerate(items):
        ok = isinstance(item, dict) and all(isinstance(item.get(k), (str, int, float)) and not isinstance(
            item.get(k), bool) and str(item.get(k)).strip() for k in ("table", "from_version"))
        if not ok:
            raise SpecError(str(path), f"reuse[{i}]", "a mapping with table and from_version (a table name and "
                            "the version whose file it reuses)", item)
        if "/" in str(item["from_version"]) or str(item["from_version"]) in (".", ".."):
            raise SpecError(str(path), f"reuse[{i}].from_version", "a version folder name", item["from_version"])
    return [{"table": str(it["table"]), "from_version": str(it["from_version"])} for it in items]


def read(table: Table) -> dict[str, np.ndarray]:
    """The table's needed columns as numpy arrays, latency converted to seconds (`seconds`); rows
    whose latency is not a finite positive number are dropped. An unreadable (corrupt, truncated)
    file or a missing column is a SpecError naming the file."""
    from rackplan.specs.reading import read_parquet

    columns = (TABLES.get(table.name) or KERNEL_TABLES[table.name])[1]
    data = read_parquet(table.path, columns)
    cols = {c: np.asarray(data.column(c).to_numpy(zero_copy_only=False)) for c in columns}
    for c, default in OPTIONAL.get(table.name, {}).items():
        cols[c] = (np.asarray(data.column(c).to_numpy(zero_copy_only=False)) if c in data.column_names
                   else np.full(data.num_rows, default))
    try:
        sec = cols.pop("latency").astype(float) * SECONDS_PER_UNIT.get(table.name, 1e-3)
    except (TypeError, ValueError):
        raise SpecError(str(table.path), "latency", "numbers (milliseconds)") from None
    keep = np.isfinite(sec) & (sec > 0)
    _check_classes(table, cols, keep)
    out = {c: v[keep] for c, v in cols.items()}
    out["seconds"] = sec[keep]
    return out


def _check_classes(table: Table, cols: dict[str, np.ndarray], keep: np.ndarray) -> None:
    """A table whose rows all lack a finite positive latency, or one of whose op classes (CLASS_COLUMN's
    values) has no such row, is a SpecError naming the file: a class the table lists but cannot fit."""
    where = f"{table.path}{f' (reused by {table.version})' if table.reused_from else ''}"
    if len(keep) and not keep.any():
        raise SpecError(where, "latency", "finite positive latencies (every row is NaN, infinite or <= 0)")
    col = CLASS_COLUMN.get(table.name)
    if col is None:
        return
    values = cols[col].astype(str)
    for v in sorted(set(values.tolist())):
        if not keep[values == v].any():
            raise SpecError(where, "latency", f"finite positive latencies in the rows of {col} {v} (every one is "
                            "NaN, infinite or <= 0: that op class cannot be fitted)")


def gpu_of(hardware: str) -> str:
    """The GPU a hardware name stands for: its first dash-separated part (gb300-nvl72 -> GB300, h200-sxm -> H200)."""
    return hardware.split("-")[0].upper()


def check_hardware(system: str, tables: dict[str, Table], hardware: str) -> None:
    """Every table was measured on the GPU of `hardware` (gpu_of): its `device` column (the name torch
    reports, e.g. 'NVIDIA GB300') must name that GPU as a word; a table without the column is held to
    the system's folder name (gb300, h200_sxm) where that names the GPU of an embedded hardware. Else
    a SpecError naming the table and the GPU it was measured on."""
    from rackplan.specs import available
    from rackplan.specs.reading import read_parquet

    def names(text: str, gpu: str) -> bool:
        word = rf"(?<![a-z0-9]){re.escape(gpu.lower())}(?![a-z0-9])"  # GB300 names neither B300 nor GB300A
        return re.search(word, text.lower().replace("_", " ")) is not None

    gpu = gpu_of(hardware)
    known = {gpu_of(h) for h in available("hardware")}
    for name in sorted(tables):
        data = read_parquet(tables[name].path, ())
        named = (sorted({str(d) for d in data.column("device").unique().to_pylist()}) if "device" in
                 data.column_names else [system] if any(names(system, g) for g in known) else [])
        other = [d for d in named if not names(d, gpu)]
        if other:
            raise SpecError(str(tables[name].path), "device", f"the GPU of --hardware {hardware} ({gpu}; pass the "
                            f"--hardware the tables of {system} were measured on)", other[0])


def most_rows(values: np.ndarray) -> str:
    """The most frequent value (the kernel with the full sweep); ties go to the first in order."""
    names, counts = np.unique(values.astype(str), return_counts=True)
    return str(names[int(np.argmax(counts))])
