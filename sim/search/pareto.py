"""Pareto front of deployments: keep those no other deployment beats on both axes."""
from __future__ import annotations

from typing import Callable, Iterable, TypeVar

T = TypeVar("T")


def front(items: Iterable[T], x: Callable[[T], float], y: Callable[[T], float]) -> list[T]:
    """Non-dominated items when maximising both x and y, sorted by x descending (y ascending).

    An item is dominated when another has x >= and y >= with one strict. Ties on both axes keep
    the first item in input order, so a deterministic input order gives a deterministic front.
    """
    order = sorted(enumerate(items), key=lambda iv: (-x(iv[1]), -y(iv[1]), iv[0]))
    out: list[T] = []
    best_y = float("-inf")
    for _, item in order:
        if y(item) > best_y:
            out.append(item)
            best_y = y(item)
    return out


def dominated(a: T, b: T, x: Callable[[T], float], y: Callable[[T], float]) -> bool:
    """True when `b` dominates `a`."""
    return x(b) >= x(a) and y(b) >= y(a) and (x(b) > x(a) or y(b) > y(a))


def thin(points: list[T], x: Callable[[T], float], y: Callable[[T], float], rel: float) -> list[T]:
    """Drop front points within `rel` (relative) of the previous kept point on both axes: a front
    sorted by x descending keeps its ends and every step that changes x or y by more than rel."""
    out: list[T] = []
    for p in points:
        if out and x(p) >= (1 - rel) * x(out[-1]) and y(p) <= (1 + rel) * y(out[-1]) and p is not points[-1]:
            continue
        out.append(p)
    return out
