"""The kit's results packed into what one device call returns: at most 8 files of at most 16 MiB each
(the device tool's limits), repacked after every stage so a call cut off at its limit still returns what
it measured.

Layout under the call's $OUT: summary.md (the comparison table and the stages' outcomes), results.tgz (the
whole results folder: kernel records, plans, replay measurements, validate summaries, stage logs), split
into results.tgz.NN parts when it is larger than one file may be (`cat results.tgz.* > results.tgz`), and
the kit's own log (written by run.sh, kept by `keep`).
"""
from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

MAX_FILES = 8          # files a device call returns
MAX_BYTES = 16 * 2**20  # bytes per returned file
ARCHIVE = "results.tgz"


class TooLarge(ValueError):
    """The results do not fit the returned files."""


def _write(path: Path, data: bytes) -> None:
    """Replace `path` whole (a call cut off mid-write leaves the previous version)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def pack(results: Path, out: Path, summary: str, keep: tuple[str, ...] = ("kit.log",),
         max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> list[Path]:
    """Write out/summary.md and out/results.tgz (or its parts) from the `results` folder; returns the
    files written. `keep`: names already in `out` that count against max_files (the run's log).
    TooLarge when the archive needs more parts than the files left."""
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(results, arcname=results.name)
    data = buf.getvalue()
    kept = [n for n in keep if (out / n).exists()]
    room = max_files - len(kept) - 1  # files left for the archive after summary.md and the kept ones
    parts = [data[i:i + max_bytes] for i in range(0, len(data), max_bytes)] or [b""]
    if len(parts) > room:
        raise TooLarge(f"results.tgz is {len(data)} B: {len(parts)} parts of {max_bytes} B, room for {room}")
    written = [out / "summary.md"]
    _write(written[0], summary.encode()[-max_bytes:])
    for old in out.glob(f"{ARCHIVE}*"):  # an earlier pack's parts
        old.unlink()
    if len(parts) == 1:
        written.append(out / ARCHIVE)
        _write(written[-1], parts[0])
    else:
        for i, part in enumerate(parts):
            written.append(out / f"{ARCHIVE}.{i:02d}")
            _write(written[-1], part)
    return written


def unpack(out: Path, dest: Path) -> Path:
    """The results folder back from out/ (one archive or its parts), extracted under dest."""
    parts = sorted(out.glob(f"{ARCHIVE}.*")) or [out / ARCHIVE]
    data = b"".join(p.read_bytes() for p in parts)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        top = tar.getnames()[0].split("/")[0]
    return dest / top
