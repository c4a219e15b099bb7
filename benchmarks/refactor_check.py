"""Behaviour-unchanged check for refactors (issue 38): snapshot the outputs a refactor must not move,
then compare a later tree against the snapshot, byte for byte.

Outputs: `rackplan simulate --plan P --json` and `rackplan explain --plan P --json` on every embedded
plan (configs/plans; stdout, stderr and exit status, so a refused plan must be refused the same
way), the planner's choice and figures (`rackplan plan --json --workers 1`: the seed scenario and the
README's H200 32-GPU case), and `python benchmarks/accuracy.py --json`. Each output is one file in
DIR; `compare` prints the files that differ (with the first differing line) and exits 1 if any do.
The CPU seconds of each case are printed beside the snapshot's (a coarse speed signal; the speed
claim itself is benchmarks/sim_speed.py).

    python benchmarks/refactor_check.py snapshot DIR
    python benchmarks/refactor_check.py compare DIR
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANS = sorted((ROOT / "configs" / "plans").glob("*.yaml"))
H200 = ["--model", "deepseek-v3", "--hardware", "h200-sxm", "--gpus", "32", "--workload", "isl4k-osl1k",
        "--ttft-p90", "2s", "--tpot-p90", "50ms"]


def cases() -> dict[str, list[str]]:
    """Case name -> command (run from the repository root)."""
    cli = [sys.executable, "-m", "rackplan.cli"]
    out = {}
    for plan in PLANS:
        out[f"simulate.{plan.stem}"] = cli + ["simulate", "--plan", str(plan.relative_to(ROOT)), "--json"]
        out[f"explain.{plan.stem}"] = cli + ["explain", "--plan", str(plan.relative_to(ROOT)), "--json"]
    out["plan.seed"] = cli + ["plan", "--json", "--workers", "1"]
    out["plan.h200"] = cli + ["plan", "--json", "--workers", "1"] + H200
    out["accuracy"] = [sys.executable, "benchmarks/accuracy.py", "--json"]
    return out


def run(cmd: list[str]) -> tuple[str, float]:
    """(rc + stdout + stderr as one text, with the files the command wrote; child CPU seconds) of one
    command. The planner runs in a fresh folder (it writes plan.yaml there, compared too), the rest in
    the repository root."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp) if "plan" in cmd[3:4] else ROOT
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        written = "".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(Path(tmp).glob("*.yaml")))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return f"rc={proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}{written}", cpu


def first_difference(a: str, b: str) -> str:
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return f"line {i + 1}: {x[:160]!r} != {y[:160]!r}"
    return "one is a prefix of the other"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["snapshot", "compare"])
    p.add_argument("folder", type=Path)
    p.add_argument("--case", action="append", help="only cases whose name contains this (repeatable)")
    a = p.parse_args()
    a.folder.mkdir(parents=True, exist_ok=True)
    times_path = a.folder / "cpu_s.json"
    old_times = json.loads(times_path.read_text()) if times_path.exists() else {}
    times, differ = dict(old_times), []
    for name, cmd in cases().items():
        if a.case and not any(c in name for c in a.case):
            continue
        text, cpu = run(cmd)
        path = a.folder / f"{name}.txt"
        if a.mode == "snapshot":
            path.write_text(text)
            times[name] = cpu
            print(f"{name:48s} {cpu:7.2f} CPU-s  saved")
            continue
        same = path.exists() and path.read_text() == text
        ref = old_times.get(name, float("nan"))
        print(f"{name:48s} {cpu:7.2f} CPU-s (snapshot {ref:7.2f})  {'same' if same else 'DIFFERS'}")
        if not same:
            differ.append(name)
            if path.exists():
                print("    " + first_difference(path.read_text(), text))
            (a.folder / f"{name}.new.txt").write_text(text)
    if a.mode == "snapshot":
        times_path.write_text(json.dumps(times, indent=1))
        return 0
    print(f"{len(differ)} case(s) differ" + (f": {', '.join(differ)}" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
