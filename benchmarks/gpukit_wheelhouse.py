"""Build the GPU kit's wheelhouse: the wheels `executor/gpukit/run.sh` installs offline on the lent machine.

    python benchmarks/gpukit_wheelhouse.py [--dest .whl]

The lent image has torch, Triton, numpy, PyYAML, rich and matplotlib (the device's KINDS.md package list)
but not simpy, so the wheelhouse holds simpy (pure Python, `pip download`, the version installed here)
and this checkout's own wheel (`pip wheel --no-deps`). The folder is git-ignored; the device call names it
in `carry`. Prints each wheel and its size (the call carries 64 MiB at most).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MISSING_THERE = ("simpy",)  # the project's dependencies the lent image lacks (KINDS.md, 2026-11-17)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=str(ROOT / ".whl"), help="wheelhouse folder (default: .whl in the checkout)")
    args = ap.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):  # one version of each: two would stop the install there
        old.unlink()
    pip = [sys.executable, "-m", "pip"]
    for name in MISSING_THERE:
        subprocess.run(pip + ["download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(dest),
                              f"{name}=={metadata.version(name)}"], check=True)
    subprocess.run(pip + ["wheel", "-q", "--no-deps", "-w", str(dest), str(ROOT)], check=True)
    total = 0
    for whl in sorted(dest.glob("*.whl")):
        total += whl.stat().st_size
        print(f"{whl.name}  {whl.stat().st_size / 2**20:.2f} MiB")
    print(f"{total / 2**20:.2f} MiB in {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
