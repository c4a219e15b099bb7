"""`rackplan` console script: an explicit table of subcommands, each module imported only when run.

A subcommand module exposes add_arguments(parser) and run(args) -> int. `rackplan --help` imports
none of them (the table carries each one-line help), so start-up stays cheap and a broken module
is a crash with its traceback when its command runs, never a command that silently disappears.

Bad input (a SpecError or any error carrying `exit_code`) prints one line and exits with that code:
2 for bad input, 3 when no layout meets the SLOs.
"""
from __future__ import annotations

import argparse
import atexit
import errno
import gc
import importlib
import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    module: str  # exposes add_arguments(parser) and run(args); or add_<name>_arguments / run_<name>
    help: str


COMMANDS = {
    "simulate": Command("rackplan.sim.commands.simulate", "simulate a plan serving a workload (the default command)"),
    "plan": Command("rackplan.sim.search.command", "search layouts for the most tokens/s per GPU under the SLOs"),
    "whatif": Command("rackplan.sim.search.whatif_command", "simulate a plan under changed hardware, model or "
                      "profile"),
    "sweep": Command("rackplan.sim.commands.sweep", "run a grid of plans or simulations (YAML) into one table and "
                     "chart, on a process pool or Ray"),
    "deploy": Command("rackplan.deploy.command", "write vLLM launch files (per-host scripts, router, benchmark, "
                      "Kubernetes) for an existing plan"),
    "execute": Command("rackplan.executor.command", "run a plan for real (gloo on CPU, NCCL on GPU)"),
    "calibrate": Command("rackplan.calibration.command", "fit a profile from measurements, tables or benchmarks"),
    "validate": Command("rackplan.calibration.validate_command", "compare a profile's predictions with "
                        "measurements"),
    "explain": Command("rackplan.sim.commands.explain", "where one step of each pool of a plan spends its time, "
                       "op by op, and its KV cache room"),
    "accuracy": Command("rackplan.accuracy.command", "predict the published deployments of benchmarks/cases and "
                        "report the errors (the accuracy benchmark)"),
    "models": Command("rackplan.sim.commands.listing", "list the embedded models"),
    "hardware": Command("rackplan.sim.commands.listing", "list the embedded hardware"),
}
DEFAULT = "simulate"  # bare `rackplan` runs the main job on the embedded defaults
# Commands whose numpy work is small arrays (the simulator, the planner, listings): OpenBLAS starts a
# pool of threads when numpy loads, which they never use (~30-60 ms of CPU a process on 2 cores, most
# of `import numpy`; benchmarks/RESULTS.md, simspeed4). They load it with one thread unless the
# environment says otherwise; their worker processes inherit that.
SERIAL_BLAS = ("simulate", "plan", "whatif", "explain", "sweep", "models", "hardware")


class UsageError(Exception):
    """A bad command-line argument (argparse's error), printed as one line with exit code 2."""

    exit_code = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (`rackplan: error: argument --X: ...`), not usage + error."""

    def error(self, message: str):
        raise UsageError(f"{self.prog.split()[-1]}: {message}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `command`'s module is imported (its arguments are added), the others are
    listed by name and help."""
    parser = _Parser(prog="rackplan", description="Plan, simulate and prove MoE serving "
                                     "layouts on GPU racks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        if name == command:
            mod = importlib.import_module(cmd.module)
            doc = (mod.__doc__ or "").strip()
            if doc:  # the docstring's first paragraph, whole (its first line alone may stop mid-sentence)
                p.description = " ".join(doc.split("\n\n")[0].split())
            (getattr(mod, f"add_{name}_arguments", None) or mod.add_arguments)(p)
            p.set_defaults(_run=getattr(mod, f"run_{name}", None) or mod.run)
    return parser


def freeze_at_exit() -> None:
    """gc.freeze at exit, except after triton loaded (execute, calibrate/validate on GPU): objects of
    its nanobind types kept alive at teardown make nanobind print a ~30-line leak report on stderr,
    which would bury a one-line error (benchmarks/RESULTS.md, badin)."""
    if "triton" not in sys.modules:
        gc.freeze()


# errnos of a path the user named (an unwritable or full output, an unreadable input): one line, exit 2
PATH_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM,
                         errno.ENAMETOOLONG, errno.ELOOP, errno.EISDIR, errno.ENOTDIR})


def os_error_line(exc: BaseException) -> str:
    """'PATH: meaning of the errno' for an OSError about a named path in PATH_ERRNOS, else ''
    (rackplan/outputs.py names its own outputs; this catches what is written or read elsewhere)."""
    if isinstance(exc, OSError) and exc.errno in PATH_ERRNOS and exc.filename:
        return f"{os.fsdecode(exc.filename)}: {os.strerror(exc.errno)}"
    return ""


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    if argv is None:  # the process's own command line (console script, `python -m`): it ends on return
        # the cyclic collection at interpreter exit would scan every object the command left (~1% of
        # a 40,000-request simulate, benchmarks/RESULTS.md, simspeed5d); frozen, they are left to the OS
        atexit.register(freeze_at_exit)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = [DEFAULT] + argv  # `rackplan --requests 200` simulates the embedded defaults
    command = argv[0] if argv[0] in COMMANDS else None
    if command in SERIAL_BLAS and "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        args = build_parser(command).parse_args(argv)
    except UsageError as exc:
        print(f"rackplan: error: {exc}", file=sys.stderr)
        return 2
    if not getattr(args, "_run", None):
        build_parser().print_help()
        return 2
    empty = next((k for k, v in vars(args).items() if v == "" or isinstance(v, list) and "" in v), None)
    if empty:  # `--profile ""` would otherwise fall back to the default silently, `--out ""` mean the working folder
        print(f"rackplan: error: {argv[0]}: argument --{empty.replace('_', '-')}: expected a value, got ''",
              file=sys.stderr)
        return 2
    from .interrupts import terminate_cleanly

    try:
        with terminate_cleanly():  # SIGTERM / SIGHUP unwind like Ctrl-C: cleanup runs, no partial output
            return int(args._run(args) or 0)
    except KeyboardInterrupt as exc:
        print(f"rackplan: interrupted{f' ({exc})' if str(exc) else ''}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 130))
    except Exception as exc:  # noqa: BLE001 - only errors that declare an exit code are user-facing
        code = getattr(exc, "exit_code", None)
        if code is None and (line := os_error_line(exc)):
            print(f"rackplan: error: {line}", file=sys.stderr)
            return 2
        if code is None:
            raise
        print(f"rackplan: error: {exc}", file=sys.stderr)
        return int(code)


if __name__ == "__main__":
    sys.exit(main())
