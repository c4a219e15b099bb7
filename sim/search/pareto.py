"""Pareto front of deployments: keep those no other deployment beats on both axes."""
from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Iterable, TypeVar

import numpy as np

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


class StreamingFront:
    """`front` of a stream: the non-dominated items kept while items arrive, O(log n) each.

    Kept items sit in order of x descending (so y ascending). Ties on both axes keep the item with
    the smaller `key`, as `front` keeps the first of a key-sorted input."""

    def __init__(self, x: Callable[[T], float], y: Callable[[T], float], key: Callable[[T], object]):
        self.x, self.y, self.key = x, y, key
        self._neg_x: list[float] = []  # -x of kept items, ascending
        self._y: list[float] = []
        self._items: list[T] = []

    def add(self, item: T) -> bool:
        """Offer an item; True when it is on the front now."""
        x, y = self.x(item), self.y(item)
        pos = bisect_left(self._neg_x, -x)  # items[:pos] have a larger x
        same_x = pos < len(self._items) and self._neg_x[pos] == -x
        last = pos if same_x else pos - 1  # the kept item with x' >= x and the largest y'
        if last >= 0 and self._y[last] >= y:
            if not (same_x and self._y[last] == y and self.key(item) < self.key(self._items[last])):
                return False  # dominated (or tied with an item that comes first)
        end = pos  # kept items from pos on have x' <= x; drop those with y' <= y
        while end < len(self._items) and self._y[end] <= y:
            end += 1
        self._neg_x[pos:end] = [-x]
        self._y[pos:end] = [y]
        self._items[pos:end] = [item]
        return True

    def items(self) -> list[T]:
        """The front, x descending."""
        return list(self._items)

    def beaten(self, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """For items with these (x, y), whether a kept item has x' >= x and y' > y: `add` refuses such an
        item now and at any later time (an item leaves the front only for one with x and y at least its
        own), so a stream may skip offering it."""
        if not self._items:
            return np.zeros(len(xs), dtype=bool)
        neg_x, y = np.array(self._neg_x), np.array(self._y)
        pos = np.searchsorted(neg_x, -xs, side="left")  # as add's bisect_left
        same_x = (pos < len(neg_x)) & (neg_x[np.minimum(pos, len(neg_x) - 1)] == -xs)
        last = np.where(same_x, pos, pos - 1)
        return (last >= 0) & (y[np.maximum(last, 0)] > ys)


class Decimated:
    """A deterministic sample of a stream: every k-th item, k doubling so at most `size` are kept."""

    def __init__(self, size: int):
        self.size, self.stride, self.count = size, 1, 0
        self._items: list = []

    def add(self, item) -> None:
        if self.count % self.stride == 0:
            self._items.append(item)
            if len(self._items) > self.size:
                self._items = self._items[::2]
                self.stride *= 2
        self.count += 1

    def takes_next(self) -> bool:
        """Whether the next item offered is kept (else `add` only counts it, as `skip` does)."""
        return self.count % self.stride == 0

    def skip(self) -> None:
        """Count an item that `takes_next` says is not kept, without building it."""
        assert not self.takes_next()
        self.count += 1

    def items(self) -> list:
        return list(self._items)
