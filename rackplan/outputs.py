"""Outputs: every file and folder a command writes appears whole or not at all, as one set.

A command stages each output as a temporary sibling (`.NAME.tmp-XXXX`), writes into it, and the
set is renamed into place at the end with SIGINT / SIGTERM / SIGHUP held back, so an interrupt or
an error at any moment leaves the earlier state (nothing, or the earlier run) and no partial file.
A folder that holds an earlier run (any of the files the command writes there) is refused before
any work unless `--force`, which replaces the whole folder at the commit; into a folder holding
other files (a plan YAML beside the run), the new files are moved in one by one.

An output given as a symbolic link is written through it: the link's target is replaced and the
link kept (a launch folder shared behind a link gets the new scripts). An operating-system error
while the set is staged or written (a full disk, a read-only file system, a folder this user may
not write) is a WriteError: one line naming the user's path (never a temporary's) and the
errno's meaning, exit 2, nothing written.
"""
from __future__ import annotations

import errno
import itertools
import os
import shutil
import tempfile
from pathlib import Path

from rackplan.interrupts import signals_held
from rackplan.specs import SpecError

_count = itertools.count()


class WriteError(Exception):
    """An output that could not be written (an OSError while staging or renaming): exit code 2."""

    exit_code = 2

    def __init__(self, path: str | Path, err: OSError):
        self.path, self.errno = str(path), err.errno
        why = os.strerror(err.errno) if err.errno else str(err)
        super().__init__(f"{path}: cannot write ({why}); nothing written")


def target(path: str | Path) -> Path:
    """Where writing `path` lands: a symbolic link's final target (a dangling one's too), else `path`."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def umask_mode(folder: bool = False) -> int:
    """The mode a plain open() / mkdir() would give under this process's umask: mkstemp and mkdtemp
    create 0600 files and 0700 folders, which the rename would keep (a plan.yaml or launch/ folder
    that no other user, e.g. the one running vLLM, can read)."""
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if folder else 0o666) & ~mask


def prepare_folder(path: str | Path, flag: str, force: bool = False, owned: tuple[str, ...] = ()) -> None:
    """Before any work: `path` can be a folder, and holds none of the `owned` names (the files the
    command writes there: an earlier run) unless `force`; else a SpecError naming `flag`."""
    from rackplan.args import check_writable

    check_writable(flag, path, folder=True)
    p = Path(path)
    earlier = sorted(n for n in owned if (p / n).exists()) if p.is_dir() else []
    if earlier and not force:
        raise SpecError(str(p), flag, f"a folder without an earlier run (it holds {', '.join(earlier)}: pass "
                        "--force to replace the folder)")


class Outputs:
    """A set of outputs staged as temporary siblings; `commit` renames them all into place.

    with Outputs() as out:
        write_report(out.folder("report"))
        dump_yaml(plan, out.file("plan.yaml"))
    # both appear here, or (on any exception) neither and no temporary is left
    """

    def __init__(self):
        self._staged: list[tuple[Path, Path, bool]] = []  # (temporary, final, replace a whole folder)
        self._shown: dict[Path, Path] = {}  # final -> the path the user named (a link to final)

    def folder(self, path: str | Path, replace: bool = False) -> Path:
        """A new empty temporary folder that becomes `path` at the commit: replacing it if it is
        empty or `replace` (--force), else its entries moved into the existing folder."""
        final = self._final(path)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
            tmp.chmod(umask_mode(folder=True))
        except OSError as exc:
            raise WriteError(path, exc) from None
        self._staged.append((tmp, final, replace))
        return tmp

    def file(self, path: str | Path) -> Path:
        """A temporary path (same suffix) that becomes `path` at the commit."""
        final = self._final(path)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError(path, exc) from None
        tmp = final.parent / f".{final.stem}.tmp-{os.getpid()}-{next(_count)}{final.suffix}"
        self._staged.append((tmp, final, False))
        return tmp

    def commit(self) -> None:
        """Rename every staged output into place (an existing folder is replaced), signals held."""
        if os.environ.get("RACKPLAN_TEST_INTERRUPT_WRITE"):  # test hook: Ctrl-C while the set is written
            raise KeyboardInterrupt
        with signals_held():
            for tmp, final, replace in self._staged:
                try:
                    _replace(tmp, final, replace)
                except OSError as exc:
                    raise WriteError(self._shown.get(final, final), exc) from None
            self._staged = []

    def discard(self) -> None:
        """Remove every staged temporary (best effort: on a read-only file system there is none)."""
        for tmp, _, _ in self._staged:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                try:
                    tmp.unlink(missing_ok=True)
                except OSError:
                    pass
        self._staged = []

    def _final(self, path: str | Path) -> Path:
        final = target(path)
        self._shown[final] = Path(path)
        return final

    def shown(self, filename) -> Path | None:
        """The user's path for an OSError's `filename` (a temporary, or a file inside a staged folder);
        with no filename (a write to an open file), the output staged last; None: not an output."""
        if not self._staged:
            return None
        if not filename:
            return self._shown.get(self._staged[-1][1], self._staged[-1][1])
        f = Path(os.path.abspath(os.fsdecode(filename)))
        for tmp, final, _ in self._staged:
            for base in (Path(os.path.abspath(tmp)), Path(os.path.abspath(final))):
                if f == base or base in f.parents:
                    return self._shown.get(final, final) / f.relative_to(base)
        return None

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.commit()
            except BaseException as err:
                failed = self._fail(err)
                if failed is None:
                    raise
                raise failed from None
        else:
            failed = self._fail(exc)
            if failed is not None:
                raise failed from None

    def _fail(self, exc: BaseException) -> WriteError | None:
        """Discard the set; an OSError about one of its outputs is returned as a WriteError naming it."""
        where = None
        if isinstance(exc, OSError) and (exc.filename or exc.errno in STORAGE_ERRNOS):
            where = self.shown(exc.filename)
        self.discard()
        return None if where is None else WriteError(where, exc)


# errors of the storage itself: a write to an open file that fails with one of these is an output's
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO})


def _replace(tmp: Path, final: Path, replace: bool) -> None:
    if tmp.is_dir() and final.is_dir() and any(final.iterdir()) and not replace:
        for entry in sorted(tmp.iterdir()):  # a folder with other files: move the new ones in
            _replace(entry, final / entry.name, True)
        tmp.rmdir()
    elif tmp.is_dir() and final.is_dir():
        aside = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.old-"))
        os.replace(final, aside / final.name)
        os.replace(tmp, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(tmp, final)


def write_text(path: str | Path, text: str) -> Path:
    """One text file written whole (temporary sibling + rename)."""
    with Outputs() as out:
        out.file(path).write_text(text)
    return Path(path)


def write_spec(obj, path: str | Path, kind: str, header: str = "", flow_leaves: bool = False) -> Path:
    """Write a spec YAML (a profile, a hardware) and load it back with the loader every command
    uses (`kind`: 'profiles', 'hardware', ...) before it is renamed into place: a file rackplan
    writes is always one rackplan reads. A spec that does not load back is a SpecError naming `path`."""
    from rackplan.specs import dump_yaml, load

    with Outputs() as out:
        tmp = out.file(path)
        dump_yaml(obj, tmp, header=header, flow_leaves=flow_leaves)
        try:
            load(kind, tmp)  # an existing file: read as a path whatever its suffix
        except SpecError as exc:
            raise SpecError(str(path), exc.field, f"{exc.expected} (the written {kind} does not load back; "
                            "nothing written)") from None
    return Path(path)
