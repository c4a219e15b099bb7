"""The one disk cache folder: values that are pure functions of their key, kept across processes.

Its users (each a subfolder): sampled imbalance points (sim/cost/imbalance.py), the planner estimate
beside a `simulate` (sim/commands/simulate.py), the package's code version, and parsed YAML text
(rackplan/specs/reading.py). A file is named by a hash of everything its value depends on, so a
stale entry is never read, only left behind; a missing, unreadable or corrupt file is recomputed,
and a folder that cannot be written only costs computing it again next time.

The folder is $RACKPLAN_CACHE_DIR (empty or "off": no disk cache), else $XDG_CACHE_HOME/rackplan or
~/.cache/rackplan.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

CACHE_ENV = "RACKPLAN_CACHE_DIR"


def cache_dir() -> Path | None:
    """Where cached values are kept (None: no disk cache)."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip() in ("", "off") else Path(env)
    try:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    except RuntimeError:  # no home directory: compute in memory only
        return None
    return Path(base) / "rackplan"


def entry(kind: str, name: str) -> Path | None:
    """The cache file `name` of subfolder `kind` (None: no disk cache)."""
    folder = cache_dir()
    return None if folder is None else folder / kind / name


def read_bytes(path: Path | None) -> bytes | None:
    """A cache file's bytes (None: no cache, no such file or unreadable)."""
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def store(path: Path | None, data: bytes | str) -> None:
    """Write a cache file whole (atomic replace; best effort: a read-only or full folder is ignored)."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".entry-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode() if isinstance(data, str) else data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
