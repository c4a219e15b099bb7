"""`rackplan` console script: one subcommand per module, each with add_arguments(parser) and run(args).

Bad input (a SpecError or any error carrying `exit_code`) prints one line and exits with that code:
2 for bad input, 3 when no layout meets the SLOs.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module exposing add_arguments(parser) and run(args) -> int; the module docstring's
# first line is the help text. Modules must not import torch at import time.
COMMANDS = {
    "simulate": "sim.commands.simulate",
    "plan": "sim.search.command",
    "whatif": "sim.search.whatif_command",
    "execute": "executor.command",
    "calibrate": "calibration.command",
    "validate": "calibration.validate_command",
    "models": "sim.commands.listing",
    "hardware": "sim.commands.listing",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rackplan",
        description="Plan, simulate and prove MoE serving layouts on GPU racks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, modname in COMMANDS.items():
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name and modname.startswith(exc.name):
                continue  # subcommand not built yet
            raise
        doc = (mod.__doc__ or "").strip().splitlines()
        p = sub.add_parser(name, help=doc[0] if doc else "", description=doc[0] if doc else "")
        add = getattr(mod, f"add_{name}_arguments", None) or mod.add_arguments
        add(p)
        p.set_defaults(_run=getattr(mod, f"run_{name}", None) or mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if not argv:
        argv = ["simulate"]  # the main job on the embedded defaults
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("rackplan: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - only errors that declare an exit code are user-facing
        code = getattr(exc, "exit_code", None)
        if code is None:
            raise
        print(f"rackplan: error: {exc}", file=sys.stderr)
        return int(code)


if __name__ == "__main__":
    sys.exit(main())
