"""Typed loading of frozen dataclasses from YAML mappings, with one-line errors naming the field.

Every spec in rackplan is a frozen dataclass. `from_dict` walks its fields, checks types, rejects
unknown and missing keys, and raises `SpecError` with the dotted path of the offending field.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

MAX_INT = 2**53  # every integer field fits a float exactly and numpy's int64 with room for sums


class SpecError(ValueError):
    """Bad input: a field that is missing, unknown, mistyped or out of range (exit code 2)."""

    exit_code = 2

    def __init__(self, where: str, field: str, expected: str, got: Any = dataclasses.MISSING):
        self.where, self.field, self.expected = where, field, expected
        got_txt = "" if got is dataclasses.MISSING else f", got {got!r}"
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}field '{field}': expected {expected}{got_txt}")


def read_yaml(path: str | Path) -> dict:
    """A YAML mapping from a file (rackplan/specs/reading.py, the one reading layer)."""
    from .reading import read_yaml as _read

    return _read(path)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({typing.cast(type, tp).__name__})"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


def _convert(tp: Any, value: Any, where: str, field: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise SpecError(where, field, _type_name(tp), value)
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where, field)
            except SpecError as exc:
                errors.append(exc)
        if len(errors) == 1:  # Optional[X]: X's own error names the inner field
            raise errors[0]
        raise SpecError(where, field, _type_name(tp), value)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise SpecError(where, field, _type_name(tp), value)
        item_tp = typing.get_args(tp)[0]
        return tuple(_convert(item_tp, v, where, f"{field}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(where, field, "a mapping", value)
        _, val_tp = typing.get_args(tp)
        return {str(k): _convert(val_tp, v, where, f"{field}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_dict(typing.cast(type, tp), value, where, prefix=field + ".")
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(where, field, "true or false", value)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(where, field, "an integer", value)
        if abs(value) > MAX_INT:
            raise SpecError(where, field, "an integer of magnitude at most 2^53", value)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(where, field, "a number", value)
        if not math.isfinite(value):  # NaN or .inf: every number field means a finite value
            raise SpecError(where, field, "a finite number", value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise SpecError(where, field, "a string", value)
        return value
    if tp is Any:
        return value
    raise TypeError(f"unsupported field type {tp!r} for {field}")


def convert(tp: Any, value: Any, where: str, field: str) -> Any:
    """One value checked and converted to field type `tp` as from_dict does (SpecError naming `field`)."""
    return _convert(tp, value, where, field)


def from_dict(cls: type, data: Any, where: str = "", prefix: str = ""):
    """Build dataclass `cls` from a mapping, checking keys and types; errors name the dotted field."""
    if not isinstance(data, dict):
        raise SpecError(where, prefix.rstrip(".") or cls.__name__, f"a mapping ({cls.__name__})", data)
    hints, known = _fields_of(cls)
    for key in data:
        if key not in known:
            raise SpecError(where, prefix + str(key), "one of the known keys: " + ", ".join(known))
    kwargs = {}
    for name, f in known.items():
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], where, prefix + name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SpecError(where, prefix + name, f"{_type_name(hints[name])} (missing)")
    try:
        return cls(**kwargs)
    except SpecError as exc:
        if exc.where:
            raise
        raise SpecError(where, prefix + exc.field, exc.expected) from None


@functools.cache
def _fields_of(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """(field types, init fields by name) of dataclass `cls`, worked out once per class (its string
    annotations are evaluated by get_type_hints: most of a spec's loading time when done per call)."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls) if f.init}


def to_dict(obj: Any) -> Any:
    """Inverse of from_dict: a plain YAML-ready structure (tuples become lists); a field marked
    OMIT_IF_NONE is left out while None (a later optional field: earlier files and hashes unchanged)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init
                and not (f.metadata.get("omit_if_none") and getattr(obj, f.name) is None)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


OMIT_IF_NONE = {"omit_if_none": True}  # dataclasses.field metadata: to_dict leaves the field out while None


def check(cond: bool, field: str, expected: str, got: Any = dataclasses.MISSING) -> None:
    """Range check inside __post_init__: raise a SpecError for `field` when `cond` is false."""
    if not cond:
        raise SpecError("", field, expected, got)


def positive(value: float, field: str) -> None:
    check(value > 0, field, "a positive value", value)


def non_negative(value: float, field: str) -> None:
    check(value >= 0, field, "a value >= 0", value)
