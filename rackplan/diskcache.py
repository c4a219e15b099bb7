"""The one disk cache folder: values that are pure functions of their key, kept across processes.

Its users (each a subfolder): sampled imbalance points (sim/cost/imbalance.py), the planner estimate
beside a `simulate` (sim/commands/simulate.py), the planner's priced instance shapes (sim/search/planner.py
`price_all`), the package's code version (`code_version`, which keys the two before), and parsed YAML text
(rackplan/specs/reading.py). A file is named by a hash of everything its value depends on, so a
stale entry is never read, only left behind; a missing, unreadable or corrupt file is recomputed,
and a folder that cannot be written only costs computing it again next time.

The folder is $RACKPLAN_CACHE_DIR (empty or "off": no disk cache), else $XDG_CACHE_HOME/rackplan or
~/.cache/rackplan.
"""
from __future__ import annotations

import hashlib
import os
import pickle
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


def remembered(kind: str, key, compute):
    """compute()'s value, kept pickled in subfolder `kind` under a hash of key() (a repr of everything
    the value depends on, the code version included; not built without a cache folder): read back when
    present, else computed and stored. An unreadable or corrupt file is computed again (and replaced)."""
    if cache_dir() is None:
        return compute()
    path = pickle_entry(kind, key())
    found = read_pickle(path)
    if found is not MISSING:
        return found
    value = compute()
    store(path, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    return value


MISSING = object()  # read_pickle: no file, or one that does not unpickle


def pickle_entry(kind: str, key: str) -> Path | None:
    """The pickle file of subfolder `kind` named by a hash of `key` (None: no disk cache)."""
    return entry(kind, hashlib.sha256(key.encode()).hexdigest()[:32] + ".pickle")


def read_pickle(path: Path | None):
    """The value pickled at `path`, or MISSING where there is none or it is corrupt (or from another version
    of a pickled class): the caller computes it again and replaces it."""
    data = read_bytes(path)
    if data is None:
        return MISSING
    try:
        return pickle.loads(data)
    except Exception:  # noqa: BLE001
        return MISSING


def code_version() -> str:
    """Hash of the package's code and shipped specs (its .py and .yaml files): what a remembered planner
    value was computed with (a change to any of them is a new value). Remembered in the cache folder
    under a hash of every file's path, size and modification time, what Python's
    own bytecode cache trusts: a run stats ~170 files instead of reading and hashing all of them."""
    files = _package_files()
    stamp = hashlib.sha256()
    for _, path in files:
        st = os.stat(path)
        stamp.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    where = entry("code-version", stamp.hexdigest()[:32])
    known = read_bytes(where)
    if known is not None and len(known) == 64:
        return known.decode()
    h = hashlib.sha256()
    for rel, path in files:
        with open(path, "rb") as fh:
            h.update("/".join(rel).encode() + b"\0" + fh.read())
    store(where, h.hexdigest())
    return h.hexdigest()


def _package_files() -> list[tuple[tuple[str, ...], str]]:
    """(path parts under its package, path) of the .py and .yaml files of rackplan, rackplan.sim and
    rackplan.configs, each package's in the order of their parts (as sorted pathlib paths)."""
    import rackplan
    import rackplan.configs
    import rackplan.sim

    out = []
    for pkg in (rackplan, rackplan.sim, rackplan.configs):
        root = os.path.dirname(pkg.__file__)
        found = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            rel = tuple(os.path.relpath(folder, root).split(os.sep)) if folder != root else ()
            found += [(rel + (n,), os.path.join(folder, n)) for n in names if n.endswith((".py", ".yaml"))]
        out += sorted(found)
    return out
