"""argparse types shared by every subcommand: counts, finite numbers, durations, output paths.

A bad value is refused by argparse before the command does any work, as one line naming the
flag (cli.py turns argparse's usage error into `rackplan: error: argument --X: expected ...`, exit 2).
"""
from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}


def _fail(expected: str, text) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")


def _int(text: str, lo: int, expected: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise _fail(expected, text) from None
    if value < lo:
        raise _fail(expected, text)
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (counts of requests, steps, ranks, GPUs, workers)."""
    return _int(text, 1, "an integer >= 1")


def int_at_most(limit: int, why: str):
    """An argparse type: an integer in [1, limit], `why` saying where the bound comes from."""
    def parse(text: str) -> int:
        value = _int(text, 1, f"an integer in [1, {limit:,}] ({why})")
        if value > limit:
            raise _fail(f"an integer in [1, {limit:,}] ({why})", text)
        return value
    return parse


def non_negative_int(text: str) -> int:
    """An integer >= 0 (seeds, warm-up steps)."""
    return _int(text, 0, "an integer >= 0")


def _float(text: str) -> float:
    try:
        value = float(str(text).strip())
    except ValueError:
        value = math.nan
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (rates, timeouts); NaN and inf are refused."""
    value = _float(text)
    if not math.isfinite(value) or value <= 0:
        raise _fail("a finite number > 0", text)
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (gaps, error thresholds); NaN and inf are refused."""
    value = _float(text)
    if not math.isfinite(value) or value < 0:
        raise _fail("a finite number >= 0", text)
    return value


def probability(text: str) -> float:
    """A number in [0, 1]."""
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise _fail("a probability in [0, 1]", text)
    return value


def duration(text: str) -> float:
    """'2s', '50ms', '0.05' (seconds) -> seconds, finite and > 0."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us)?\s*", str(text))
    value = float(m.group(1)) * _UNITS[m.group(2) or ""] if m else math.nan
    if not math.isfinite(value) or value <= 0:
        raise _fail("a positive finite duration like 2s or 50ms", text)
    return value


def per_token_duration(text: str) -> float:
    """A per-token time (TPOT) as `duration` reads it, refusing a bare number of 1 or more: '50'
    would be 50 s per token, where 50 ms was surely meant (write 50ms, or 50s to mean seconds)."""
    value = duration(text)
    if value >= 1.0 and re.fullmatch(r"\s*[0-9.eE+-]+\s*", str(text)):
        raise _fail(f"a unit on a per-token time of 1 or more ({text.strip()}ms, or {text.strip()}s to mean "
                    "seconds per token)", text)
    return value


# Less free space than this on an output's file system is refused before any work: the smallest
# outputs are a plan.yaml of a few kB, the largest a plan report (pareto.png ~0.1 MB) or the
# measurements of a run (~0.1-1 MB for the tiny plans); a file system this full is full in practice.
MIN_FREE_BYTES = 1 << 20


def check_writable(flag: str, path: str | Path, folder: bool = False) -> None:
    """Refuse an output path that cannot be written before any work is done: a parent that is a
    file, a file where a folder is wanted, a read-only file system, a folder this user may not
    write, or one with under MIN_FREE_BYTES free (SpecError naming the flag, the folder and the
    errno's meaning). A symbolic link is checked at its target (rackplan/outputs.py writes there)."""
    from rackplan.outputs import target
    from rackplan.specs import SpecError

    p = Path(os.path.abspath(target(path)))  # "." has no parents to check
    if folder and p.exists() and not p.is_dir():
        raise SpecError("", flag, "a folder path (this is a file)", str(path))
    if not folder and p.is_dir():
        raise SpecError("", flag, "a file path (this is a folder)", str(path))
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SpecError("", flag, f"a path whose parent folders can be created ({parent} is a file)",
                                str(path))
            for where in (parent, p) if folder and p.is_dir() else (parent,):  # entries are moved into p
                _check_storage(flag, path, where)
            return


def _check_storage(flag: str, path: str | Path, folder: Path) -> None:
    import errno

    from rackplan.specs import SpecError

    def refuse(code: int, note: str = "") -> None:
        raise SpecError("", flag, f"a writable path ({folder}: {os.strerror(code)}"
                        f"{note})", str(path))

    try:
        st = os.statvfs(folder)
    except OSError as exc:
        refuse(exc.errno or errno.EIO)
    if st.f_flag & os.ST_RDONLY:
        refuse(errno.EROFS)
    if not os.access(folder, os.W_OK | os.X_OK):
        refuse(errno.EACCES)
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        refuse(errno.ENOSPC, f", {free:,} bytes free, at least {MIN_FREE_BYTES:,} needed")


def refuse_unused(command: str, flags: dict[str, object], expected: str) -> None:
    """A knob given where it does nothing is an error, not a silence: the first of `flags` that was
    given (truthy, or a number) is one SpecError naming it and what it needs (`expected`)."""
    from rackplan.specs import SpecError

    for flag, value in flags.items():
        if value is not None and value is not False and value != [] and value != "":
            raise SpecError(command, flag, expected, value)
