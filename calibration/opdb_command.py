"""`rackplan calibrate --op-database SYSTEM ...`: fit, print the per-class error table, write the profile.

Nothing is written unless every table reads and every fit succeeds (outputs.write_spec: loaded back, then renamed).
"""
from __future__ import annotations

import json
import sys
import time

from rackplan.outputs import write_spec
from rackplan.specs import SpecError, load_hardware, load_profile

from .io import utc_date
from .opdb_import import compact, import_profile, summary_rows

PROGRESS_PREFIX = "calibrate: fitting "  # stderr's progress lines when it is not a terminal (not errors)


def run_op_database(args) -> int:
    """Fit a measured profile from the op database; write it only when every table read and fit."""
    if not args.hardware:
        raise SpecError("calibrate --op-database", "--hardware", "the hardware the tables were measured on")
    if not args.out:
        raise SpecError("calibrate --op-database", "--out", "a profile YAML path to write")
    hw, base = load_hardware(args.hardware), load_profile(args.base or "datasheet")
    from .opdb import check_hardware, data_root, locate

    check_hardware(args.op_database, locate(data_root(args.op_database_root), args.op_database, args.framework,
                                            args.version), hw.name)
    name = args.name or args.out.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    from rich.console import Console

    con, start = Console(stderr=True), time.monotonic()

    def progress(key: str, n: int) -> None:
        """The class being fitted: a status line on a terminal; elsewhere (a log, CI) one line per class
        with the time so far (PROGRESS_PREFIX), so a run of many minutes does not stay silent to its end."""
        status.update(f"fitting {key} ({n} rows)")
        if not con.is_terminal:
            print(f"{PROGRESS_PREFIX}{key} ({n} rows), {time.monotonic() - start:.0f} s so far", file=sys.stderr,
                  flush=True)

    with con.status("reading the op database") as status:
        prof, fits = import_profile(args.op_database, args.framework, args.version, hw, base, name,
                                    args.op_database_root, progress=progress)
    rows = summary_rows(prof, fits)
    cmd = (f"rackplan calibrate --op-database {args.op_database} --framework {args.framework}"
           + (f" --version {args.version}" if args.version else "") + f" --hardware {hw.name} --base {base.name}")
    src = prof.provenance["source"]
    write_spec(compact(prof), args.out, "profiles", flow_leaves=True,
               header=f"# Measured profile: `{cmd}` on {utc_date()} (UTC),\n# from the per-op tables of "
               f"{src['package']} {src['version']}. fit_error: MAPE % per op class on held-out rows;\n"
               "# provenance.classes: the rows and tables of each class; fallbacks: where what is not fitted "
               "comes from.\n")
    if args.json:
        print(json.dumps({"out": args.out, "classes": rows}, indent=2))
    else:
        print(f"profile {name} for {hw.name} from {args.op_database}/{args.framework} -> {args.out}")
        print(f"  {'op class':<22} {'table':<28} {'version':<8} {'fit':>6} {'held':>5} {'MAPE fit':>8} "
              f"{'held-out':>8} {'target':>6} {'noise':>6}  status")
        for r in rows:
            print(f"  {r['class']:<22} {r['table']:<28} {r['version']:<8} {r['rows_fit']:>6} {r['rows_held']:>5} "
                  f"{r['mape_fit']:>7.1f}% {r['mape_held']:>7.1f}% {r['target']:>5g}% {_pct(r['table_roughness'])}  "
                  f"{r['status']}")
        for f in fits:  # a class measured from another framework's table (opdb_import.GRAPH_TIMED_SOURCE)
            if "framework" in f.extra and f.key in prof.curves:
                print(f"  {f.key}: {prof.fallbacks[f.key]}")
        print("  noise: the table's own scatter (each row predicted from its neighbours in m), a floor for a curve "
              "smooth in m (kernel switches by m count in it)")
    return 0


def _pct(x: float) -> str:
    return f"{x:>5.1f}%" if x == x else f"{'-':>6}"
