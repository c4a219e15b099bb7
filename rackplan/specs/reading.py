"""The one reading layer: every input file (YAML, JSON, JSONL, CSV, traces, parquet) is opened here.

Whatever is wrong with a file - missing, not UTF-8, malformed, duplicate keys, nested too deep,
a non-finite or out-of-range number - becomes one `SpecError` naming the file (and line) and the
field, so a command prints one line and exits 2. Readers elsewhere take the parsed values from
here and check their own fields with `number` / `count`; none opens a file its own way.
"""
from __future__ import annotations

import csv
import hashlib
import json
import marshal
import math
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Optional

import yaml

from rackplan.diskcache import entry, read_bytes, store

from .fields import SpecError

MAX_DEPTH = 64  # nesting levels any input may have (the deepest shipped spec has 5)
PARSE_CACHE_MIN = 4096  # characters: shorter texts are parsed each time (parse_yaml)


class _UniqueKeys:
    """A loader's mapping constructor that refuses duplicate keys."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
            except TypeError:  # an unhashable key: the base constructor says so
                break
            if dup:
                raise _Refused(f"unique keys ('{key}' repeated at line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep)


class _Loader(_UniqueKeys, yaml.SafeLoader):
    """SafeLoader that reads `1e6` / `2.5e-3` as floats (YAML 1.1 wants a sign and a dot), refuses
    duplicate keys and limits nesting depth."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise _Refused(f"at most {MAX_DEPTH} nesting levels (line {mark.line + 1})")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Refused(Exception):
    """A structural problem found while parsing (duplicate key, nesting), turned into a SpecError."""


# The package's own configs (known well-formed and shallow) go through libyaml's parser where PyYAML
# has it, about 8x faster (start-up of every command reads several): the same floats and duplicate-key
# check; the nesting limit is libyaml's own (1,000 levels) there.
if yaml.__with_libyaml__:
    class _ShippedLoader(_UniqueKeys, yaml.CSafeLoader):
        """libyaml's SafeLoader with _Loader's float rule and duplicate-key check."""
else:
    _ShippedLoader = _Loader  # type: ignore[misc, assignment]  # (the same loader where libyaml is absent)

FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT_RE, list("-+0123456789."))
if _ShippedLoader is not _Loader:
    _ShippedLoader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT_RE, list("-+0123456789."))


def _existing(path: str | Path, what: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise SpecError(str(path), "(file)", f"an existing {what}")
    return path


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SpecError(where, "(encoding)", f"UTF-8 text (undecodable byte at line {line})") from None


def read_text(path: str | Path, what: str = "file") -> str:
    """A whole text file, UTF-8; missing, unreadable or undecodable files are SpecErrors."""
    path = _existing(path, what)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError(str(path), "(file)", f"a readable {what}", exc.strerror) from None
    return _decode(data, str(path))


def parse_yaml(text: str, where: str = "", shipped: bool = False) -> Any:
    """YAML text (safe) -> data; parse errors, duplicate keys and deep nesting are SpecErrors.
    `shipped`: one of the package's own configs (parsed by libyaml where available).
    A text parsed before is read back from the disk cache (_parsed_entry), as the parser built it."""
    cached = _parsed_entry(text, shipped)
    blob = read_bytes(cached)
    if blob is not None:
        try:
            return marshal.loads(blob)
        except (ValueError, EOFError, TypeError):
            pass  # corrupt: parsed again (and overwritten)
    try:
        data = yaml.load(text, Loader=_ShippedLoader if shipped else _Loader)
    except _Refused as exc:
        raise SpecError(where, "(yaml)", str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}" if mark else "unknown line"
        raise SpecError(where, "(yaml)", f"well-formed YAML (parse error at {line})") from None
    except RecursionError:
        raise SpecError(where, "(yaml)", f"at most {MAX_DEPTH} nesting levels") from None
    if cached is not None:
        try:
            store(cached, marshal.dumps(data))
        except ValueError:  # a value marshal cannot write (a YAML timestamp): parsed each time
            pass
    return data


def _parsed_entry(text: str, shipped: bool) -> Path | None:
    """The disk cache file (rackplan/diskcache.py) of a text's parsed data: named by a hash of the text,
    the loader and what the parse depends on besides (this module's source, PyYAML's version, libyaml's
    presence, the Python version, whose marshal format the file is in). Only texts of a few KB and
    more are cached (the shipped profiles, models, bands): below, parsing costs about what reading a
    file back does. None: no disk cache, or a short text."""
    if len(text) < PARSE_CACHE_MIN:
        return None
    key = hashlib.sha256(f"{_parser_version()}\0{int(shipped)}\0".encode() + text.encode()).hexdigest()
    return entry("yaml", key[:32])


@lru_cache(maxsize=1)
def _parser_version() -> str:
    source = Path(__file__).read_bytes()
    return hashlib.sha256(source + repr((yaml.__version__, yaml.__with_libyaml__, sys.version_info)).encode()
                          ).hexdigest()


def read_yaml(path: str | Path, shipped: bool = False) -> dict:
    """A YAML file whose top level is a mapping (`shipped`: see parse_yaml)."""
    path = _existing(path, "YAML file")
    data = parse_yaml(read_text(path), str(path), shipped)
    if not isinstance(data, dict):
        raise SpecError(str(path), "(top level)", "a mapping", type(data).__name__)
    return data


def _unique_pairs(pairs):
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _Refused(f"unique keys ('{key}' repeated)")
    return out


class _NonFinite(Exception):
    """A NaN / Infinity literal or an overflowing number in JSON (found again by check_tree to name it)."""


def _refuse_constant(_name: str):
    raise _NonFinite


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise _NonFinite
    return value


_FINITE = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant,
                           parse_float=_finite_float)
_ANY = json.JSONDecoder(object_pairs_hook=_unique_pairs)


def parse_json(text: str, where: str = "", finite: bool = True) -> Any:
    """JSON text -> data; duplicate keys, nesting too deep and (with `finite`) NaN/Infinity anywhere
    are SpecErrors naming the field."""
    try:
        return (_FINITE if finite else _ANY).decode(text)
    except _NonFinite:
        try:
            data = json.loads(text)  # again, permissively, to name the field
        except (ValueError, RecursionError):
            raise SpecError(where, "(json)", "well-formed JSON with finite numbers") from None
        check_tree(data, where, finite)
        raise SpecError(where, "(json)", "finite numbers") from None
    except _Refused as exc:
        raise SpecError(where, "(json)", str(exc)) from None
    except RecursionError:
        raise SpecError(where, "(json)", f"at most {MAX_DEPTH} nesting levels") from None
    except json.JSONDecodeError as exc:
        raise SpecError(where, "(json)", f"well-formed JSON (parse error at line {exc.lineno} column "
                        f"{exc.colno})") from None


def check_tree(data: Any, where: str, finite: bool = True) -> None:
    """Nesting at most MAX_DEPTH; with `finite`, no NaN or infinite number (SpecError names the field)."""
    stack = [(data, "", 1)]
    while stack:
        obj, field, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SpecError(where, field or "(top level)", f"at most {MAX_DEPTH} nesting levels")
        if isinstance(obj, dict):
            stack += [(v, f"{field}.{k}" if field else str(k), depth + 1) for k, v in obj.items()]
        elif isinstance(obj, list):
            stack += [(v, f"{field}[{i}]", depth + 1) for i, v in enumerate(obj)]
        elif finite and isinstance(obj, float) and not math.isfinite(obj):
            raise SpecError(where, field or "(value)", "a finite number", obj)


def read_json(path: str | Path, what: str = "JSON file", finite: bool = True) -> Any:
    """A whole JSON file (see parse_json)."""
    path = _existing(path, what)
    try:
        return parse_json(read_text(path, what), str(path), finite)
    except SpecError as exc:
        if exc.field != "(json)":
            raise
        raise SpecError(exc.where, exc.field, f"{what}: {exc.expected}") from None


def _bad_line(path: Path) -> int:
    """Number of the first line of `path` that is not UTF-8 (the error path only)."""
    with path.open("rb") as fh:
        for i, raw in enumerate(fh, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return i
    return 0


def text_lines(path: str | Path, what: str = "file") -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, streamed; undecodable bytes are a SpecError naming the line."""
    path = _existing(path, what)
    i = 0
    with path.open(encoding="utf-8", newline="") as fh:
        try:
            for i, line in enumerate(fh, 1):
                yield i, line
        except UnicodeDecodeError:  # decoded in blocks: find the line again, byte by line
            raise SpecError(f"{path}:{_bad_line(path)}", "(encoding)", "UTF-8 text (undecodable byte)") from None


def read_jsonl(path: str | Path, what: str = "JSONL file", finite: bool = True) -> Iterator[tuple[str, dict]]:
    """(where, object) of each non-empty line: one JSON object per line, else a SpecError naming the line."""
    for i, line in text_lines(path, what):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            rec = parse_json(line, where, finite)
        except SpecError as exc:
            if exc.field != "(json)":
                raise
            raise SpecError(where, "(line)", "one complete JSON object per line") from None
        if not isinstance(rec, dict):
            raise SpecError(where, "(line)", "a JSON object", type(rec).__name__)
        yield where, rec


def read_csv(path: str | Path, what: str = "CSV file", comments: bool = False) -> Iterator[tuple[str, list[str]]]:
    """(where, cells) of each non-empty row, the header first (where ends in ':1' or its line);
    `comments` skips lines starting with '#'. Undecodable or malformed rows are SpecErrors."""
    def rows():
        for i, line in text_lines(path, what):
            if not line.strip() or (comments and line.lstrip().startswith("#")):
                continue
            yield i, line

    numbered = rows()
    line_no = [0]

    def feed():
        for i, line in numbered:
            line_no[0] = i
            yield line

    reader = csv.reader(feed())
    try:
        for cells in reader:
            if cells:
                yield f"{path}:{line_no[0]}", cells
    except csv.Error as exc:
        raise SpecError(f"{path}:{line_no[0]}", "(row)", "well-formed CSV", str(exc)) from None


def read_parquet(path: str | Path, columns: tuple[str, ...]):
    """A parquet table holding `columns` (pyarrow Table); corrupt or truncated files are SpecErrors."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SpecError("--op-database", "pyarrow", "installed (pip install 'rackplan[opdb]')") from None
    path = _existing(path, "parquet table")
    try:
        data = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid/OSError for corrupt files
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(str(path), "(parquet)", "a readable parquet table", reason) from None
    missing = [c for c in columns if c not in data.column_names]
    if missing:
        raise SpecError(str(path), missing[0], f"a column ({', '.join(columns)})")
    return data


def number(value: Any, where: str, field: str, lo: Optional[float] = None, hi: Optional[float] = None,
           lo_open: bool = False, integer: bool = False) -> float:
    """A finite number (int with `integer`) within [lo, hi] ((lo, hi] with lo_open): JSON numbers or
    CSV text; anything else is a SpecError naming the field and the range."""
    want = ("a whole number" if integer else "a finite number") + _range(lo, hi, lo_open)
    try:
        if isinstance(value, bool):
            raise ValueError
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(where, field, want, value) from None
    if not math.isfinite(x) or (integer and not x.is_integer()):
        raise SpecError(where, field, want, value)
    if (lo is not None and (x <= lo if lo_open else x < lo)) or (hi is not None and x > hi):
        raise SpecError(where, field, want, value)
    return int(x) if integer else x


def _range(lo, hi, lo_open) -> str:
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f" {'>' if lo_open else '>='} {lo:g}"
    if lo is None:
        return f" <= {hi:g}"
    return f" in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
