"""Run a grid of plans or simulations (sim/sweep.py) into one table and one chart.

    rackplan sweep grid.yaml --out DIR [--workers N] [--ray auto|ADDRESS]

Writes DIR/sweep.csv (and DIR/sweep.parquet where pyarrow is installed) with one row per cell in
grid order, and DIR/sweep.png (tokens/s/GPU against tokens/s/user, one point per cell). Finished
cells are appended to DIR/cells.jsonl as they finish: running the same grid again into the same
folder keeps them and runs only the rest (--force starts over). Cells run on a local process pool
of --workers processes, or on Ray with --ray (`auto`: a local Ray instance of --workers CPUs;
otherwise the address of a running cluster; `pip install 'rackplan[ray]'`). The table does not
depend on the backend or the number of workers.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path

from rackplan.args import check_writable, positive_int
from rackplan.outputs import Outputs
from rackplan.specs import SpecError

from .. import sweep

DONE = "cells.jsonl"  # finished cells, one JSON object a line: {"key": ..., "row": {...}}
OUTPUTS = ("sweep.csv", "sweep.parquet", "sweep.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("grid", help="grid YAML (sim/sweep.py's docstring shows one)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder of sweep.csv, sweep.png and cells.jsonl")
    p.add_argument("--workers", type=positive_int, default=min(8, os.cpu_count() or 1),
                   help="processes (or Ray CPUs of a local instance) running cells (default: the CPU count, "
                   "at most 8; the table does not depend on it)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run the cells on Ray: 'auto' starts a local instance, else a cluster's address")
    p.add_argument("--force", action="store_true", help="drop the folder's finished cells and run every cell")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def finished(folder: Path, keys: set[str]) -> dict[str, dict]:
    """Rows of the folder's finished cells whose key is in `keys` (an earlier run of this grid); a
    line cut short by an interrupted write is ignored (that cell runs again)."""
    path = folder / DONE
    out: dict[str, dict] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict) and doc.get("key") in keys and isinstance(doc.get("row"), dict):
            out[doc["key"]] = doc["row"]
    return out


_G: dict = {}


def _init(grid) -> None:
    _G["grid"] = grid


def _pool_task(cell):
    return cell, sweep.run_cell(_G["grid"], cell)


def pool_map(grid, todo: list, workers: int):
    """(cell, row) of each cell, in grid order, over a fork pool (inline for one worker)."""
    from rackplan.interrupts import process_map

    if workers <= 1 or len(todo) < 2:
        for cell in todo:
            yield cell, sweep.run_cell(grid, cell)
        return
    yield from process_map(_pool_task, todo, min(workers, len(todo)), _init, (grid,),
                           chunksize=max(1, len(todo) // (16 * workers)))


def start_ray(address: str, workers: int):
    """The ray module, connected: a local instance of `workers` CPUs for 'auto', else the cluster at
    `address` (before any output: a bad address is one line, exit 2)."""
    try:
        import ray
    except ImportError:
        raise SpecError("", "--ray", "Ray installed (pip install 'rackplan[ray]')") from None
    local = address == "auto"
    try:
        ray.init(address=None if local else address, num_cpus=workers if local else None, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise SpecError("", "--ray", f"'auto' or the address of a running Ray cluster ({exc})", address) from None
    return ray


def ray_map(ray, grid, todo: list):
    """(cell, row) of each cell as Ray finishes them; shuts Ray down at the end."""
    try:
        task = ray.remote(num_cpus=1)(sweep.run_cell)
        grid_ref = ray.put(grid)
        pending = {task.remote(grid_ref, cell): cell for cell in todo}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=min(len(pending), 16), timeout=1.0)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        ray.shutdown()


def write_table(folder: Path, rows: list[dict], out: Outputs) -> list[str]:
    """sweep.csv (and sweep.parquet with pyarrow) of the rows in grid order; the files written."""
    with open(out.file(folder / "sweep.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=sweep.COLUMNS)
        w.writeheader()
        w.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()} for r in rows)
    names = ["sweep.csv"]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return names
    cols = {c: [r.get(c, "") for r in rows] for c in sweep.COLUMNS}
    table = pa.table({c: pa.array([None if v == "" else v for v in vals]) if _numeric(vals) else
                      pa.array([str(v) for v in vals]) for c, vals in cols.items()})
    pq.write_table(table, out.file(folder / "sweep.parquet"))
    return names + ["sweep.parquet"]


def _numeric(values: list) -> bool:
    nums = [v for v in values if v != ""]
    return bool(nums) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in nums) and \
        len({type(v) for v in nums}) == 1


def write_chart(path: Path, rows: list[dict]) -> None:
    """Tokens/s/GPU against tokens/s/user, one point per cell that measured both, coloured by
    model / hardware (plan cells) or plan (simulate cells)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    groups = sweep.groups(rows)
    for name, rs in groups.items():
        ax.scatter([r["tps_per_user"] for r in rs], [r["output_tps_per_gpu"] for r in rs], s=14, label=name)
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per GPU")
    sources = sorted({r["source"] for r in rows if r.get("source")})
    ax.set_title(f"sweep: {len(rows)} cells ({'; '.join(sources) or 'no results'})", fontsize=9)
    if groups:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run(args) -> int:
    check_writable("--out", args.out, folder=True)
    grid = sweep.load_grid(args.grid)
    all_cells = sweep.cells(grid)
    folder = Path(args.out)
    keys = {c.key(grid): c for c in all_cells}
    done = {} if args.force else finished(folder, set(keys))
    todo = [c for c in all_cells if c.key(grid) not in done]
    sweep.check(grid, todo)  # bad names or keys refused before any cell runs
    ray = start_ray(args.ray, args.workers) if args.ray else None
    folder.mkdir(parents=True, exist_ok=True)
    if args.force and (folder / DONE).exists():
        (folder / DONE).unlink()
    kept = len(all_cells) - len(todo)
    from ..search.command import _Bar

    with _Bar(not args.quiet and sys.stderr.isatty()) as bar, open(folder / DONE, "a+b") as log:
        if log.seek(0, os.SEEK_END):
            log.seek(-1, os.SEEK_END)
            if log.read(1) != b"\n":
                log.write(b"\n")  # after a line an interrupted write cut short
        advance = bar.stage("sweep", len(todo))
        results = ray_map(ray, grid, todo) if ray else pool_map(grid, todo, args.workers)
        for cell, row in results:
            done[cell.key(grid)] = row
            log.write((json.dumps({"key": cell.key(grid), "row": row}, sort_keys=True) + "\n").encode())
            log.flush()
            advance()
    rows = [done[c.key(grid)] | {"cell": c.index} for c in all_cells]  # (a repeated cell shares a key)
    with Outputs() as out:
        names = write_table(folder, rows, out)
        write_chart(out.file(folder / "sweep.png"), rows)
        from ..htmlreport import sweep_page
        out.file(folder / "report.html").write_text(sweep_page(rows))
    failed = sum(r["status"] != "ok" for r in rows)
    print(f"sweep: {len(rows)} cells ({kept} kept from an earlier run, {len(todo)} run, {failed} without a result) "
          f"-> {', '.join(str(folder / n) for n in names + ['sweep.png', 'report.html'])}")
    return 0
