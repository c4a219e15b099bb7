"""Routing: which instance of a pool a request goes to, and which DP rank of it the request binds to.

Instances (the router in front of the pools; plan.router):
  - least_loaded: the fewest queued requests or prompt tokens (what the pool reports as its load);
    ties go round-robin (a counter of the router's decisions), so idle instances share the work;
  - round_robin: each pool its own turn;
  - prefix_aware: the least prompt work queued ahead plus this request's uncached part (the most
    cached blocks win between equal queues), ties by the pool's turn; without a request (a decode
    pool) it falls back to least_loaded;
  - session_affine: a session's later turns go to the instance its previous turn ran on (whose prefix
    cache holds its context), its first turn (and any request of no session) by least_loaded: vLLM
    router's sticky_least_loaded, llm-d's session-affinity-scorer.
DP ranks (inside one instance): vLLM's DP load balancer (DPLBAsyncMPClient) sends a request to the
engine core with the lowest `4 * waiting + running`, the first one on ties; it stays there.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Sequence
from typing import Any

ROUTERS = ("least_loaded", "round_robin", "prefix_aware", "session_affine")
WAITING_WEIGHT = 4  # vLLM v1/engine/core_client.py: score = waiting * 4 + running


class Router:
    """The router's state (its decisions over every pool, and each pool's turn) and its pick."""

    def __init__(self, policy: str):
        if policy not in ROUTERS:
            raise ValueError(f"router {policy!r}: expected one of {', '.join(ROUTERS)}")
        self.policy = policy
        self.decisions = 0  # picks so far, every pool (least_loaded: ties rotate)
        self.turns: dict[object, int] = {}  # picks so far per pool (round_robin, prefix_aware)

    def pick(self, pool: object, loads: Sequence[float] | LoadIndex, uncached: Sequence[float] | None = None,
             home: int | None = None) -> int:
        """Index of the instance of `pool` (any hashable naming it) a request goes to. `loads`: each
        instance's load; `uncached` (prefix_aware, with a request): per instance, the queued prompt
        tokens ahead plus this request's part its prefix cache misses; `home` (session_affine): the
        instance the request's session last ran on, None for a first turn."""
        self.decisions += 1
        self.turns[pool] = self.turns.get(pool, 0) + 1
        return choose(self.policy, loads, self.decisions, self.turns[pool], uncached, home)


def choose(policy: str, loads: Sequence[float] | LoadIndex, decision: int, turn: int,
           uncached: Sequence[float] | None = None, home: int | None = None) -> int:
    """The pick of the router's `decision`-th decision, the pool's `turn`-th (both counted from 1);
    the executor keeps the counts on its store, the simulator in Router."""
    n = len(loads)
    if n == 1:
        return 0
    if policy == "session_affine" and home is not None and 0 <= home < n:
        return home
    if policy == "round_robin":
        return (turn - 1) % n
    if policy == "prefix_aware" and uncached is not None:
        return min(range(n), key=lambda i: (uncached[i], (i - turn) % n))
    return loads.least(decision) if isinstance(loads, LoadIndex) else least_loaded(loads, decision)


def least_loaded(loads: Sequence[float], turn: int) -> int:
    """The instance with the lowest load; among equal ones the first at or after `turn` (mod n)."""
    n = len(loads)
    best, low, off = 0, loads[0], (-turn) % n
    for i in range(1, n):
        load = loads[i]
        if load < low or (load == low and (i - turn) % n < off):
            best, low, off = i, load, (i - turn) % n
    return best


class LoadIndex:
    """`least_loaded` over a pool whose loads change a few at a time: O(log n) a pick instead of a
    scan of every instance's load (a 1,150-instance prefill pool read 1,150 loads a request).

    `members[i].load` is instance i's load; `touch(i)` says it may have changed (O(1): the
    instance's serving policy calls it, EngineCore.on_load), and the next `least` re-reads only the
    touched ones. Instances are grouped by load (load -> their indices, sorted) under a heap of the
    loads present, so `least(turn)` is the first index at or after `turn` mod n among the lowest
    load's group, else that group's first: exactly `least_loaded`'s pick, ties included."""

    def __init__(self, members: Sequence[Any]):
        self.members = members
        self.loads = [m.load for m in members]  # [n] each instance's load as last read
        self.groups: dict[float, list[int]] = {}  # load -> instances at it, sorted
        for i, load in enumerate(self.loads):
            self.groups.setdefault(load, []).append(i)
        self.heap = list(self.groups)  # the loads present (and some gone: skipped when on top)
        heapq.heapify(self.heap)
        self.touched: set[int] = set()
        self.touch = self.touched.add  # touch(i): instance i's load may have changed

    def __len__(self) -> int:
        return len(self.members)

    def least(self, turn: int) -> int:
        """least_loaded([m.load for m in members], turn)."""
        if self.touched:
            self._reread()
        heap, groups = self.heap, self.groups
        while heap[0] not in groups:  # a load no instance has any more
            heapq.heappop(heap)
        group = groups[heap[0]]
        j = bisect_left(group, turn % len(self.members))
        return group[j] if j < len(group) else group[0]

    def _reread(self) -> None:
        loads, groups, members = self.loads, self.groups, self.members
        for i in self.touched:
            new, old = members[i].load, loads[i]
            if new == old:
                continue
            loads[i] = new
            group = groups[old]
            if len(group) == 1:
                del groups[old]
            else:
                del group[bisect_left(group, i)]
            group = groups.get(new)
            if group is None:
                groups[new] = [i]
                heapq.heappush(self.heap, new)
            else:
                insort(group, i)
        self.touched.clear()
        if len(self.heap) > 2 * len(groups) + 64:  # gone loads piling up under a low one: rebuild (amortised O(1))
            self.heap = list(groups)
            heapq.heapify(self.heap)


def bind_rank(waiting: Sequence[int], running: Sequence[int]) -> int:
    """vLLM's DP rank for a new request: the lowest WAITING_WEIGHT * waiting + running, first on ties."""
    best, low = 0, WAITING_WEIGHT * waiting[0] + running[0]
    for r in range(1, len(waiting)):
        score = WAITING_WEIGHT * waiting[r] + running[r]
        if score < low:
            best, low = r, score
    return best
