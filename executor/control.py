"""The control plane of disaggregated serving, on the run's c10d store (the TCPStore of the local
launcher or of torchrun): arrivals (a closed loop's are published when a request finishes; paced
bursts are released by the prefill leader, the only one that reads them), the router (any prefill
leader routes an arrived request: an atomic add on claim/<rid> decides a race; the plan's router,
rackplan/policy/route.choose, over the prefill instances' queued prompt tokens, its decision counts
kept here; the request goes to the chosen instance's queue), decode counts per decode rank (bound
and running, what the router and vLLM's rank binding read), and one KV inbox per decode instance
(headers: request, bound rank, source rank, length, first token).
"""
from __future__ import annotations

import json
import math
import time

import numpy as np

from rackplan.policy import bind_rank, choose

INBOX_POLL_S = 0.0002  # an idle decode leader's look at its inbox (a store check costs ~15 us)


class Control:
    """The control plane on the run's c10d store: arrivals, the router, decode load, KV inboxes."""

    def __init__(self, store, arrival_s: np.ndarray, concurrency: int, paced: bool = False):
        """`arrival_s`: open-loop arrival times (seconds from the run start); `concurrency`: closed loop;
        `paced`: the requests of one arrival instant arrive when the (one) prefill instance releases
        them (`release`), not at that instant: its leader is the only reader of their arrivals."""
        self.store, self.n, self.concurrency = store, len(arrival_s), concurrency
        self.arrival_s = arrival_s
        self.paced = paced
        self.released: dict[int, float] = {}  # paced: rid -> the time its burst was released

    def arrival(self, rid: int) -> float:
        """Arrival time of request `rid` (NaN while a closed loop, or pacing, has not released it)."""
        if self.paced:
            return self.released.get(rid, math.nan)
        if not self.concurrency:
            return float(self.arrival_s[rid])
        if rid < self.concurrency:
            return 0.0
        key = f"arr/{rid}"
        return float(self.store.get(key)) if self.store.check([key]) else math.nan

    def release(self, now: float) -> int:
        """Paced: the next arrival instant's requests (equal `arrival_s`) arrive now, once every request
        released before has been claimed (a burst waits for room, and the next one for it); how many."""
        first = len(self.released)
        if first >= self.n or self.next_unclaimed() < first:
            return 0
        rid = first
        while rid < self.n and self.arrival_s[rid] == self.arrival_s[first]:
            self.released[rid] = now
            rid += 1
        return rid - first

    def next_unclaimed(self) -> int:
        return int(self.store.add("next", 0))

    def route(self, now: float, router: str, fronts: list[str], need) -> int:
        """Route every request that has arrived and is not routed yet to a prefill instance (the
        plan's `router` on their queued prompt tokens; `need[rid]`: its prompt tokens to compute),
        posted to that instance's queue `pin/<name>`; how many this call routed."""
        n = 0
        while True:
            cur = self.next_unclaimed()
            if cur >= self.n or not self.arrival(cur) <= now:
                return n
            if int(self.store.add(f"claim/{cur}", 1)) != 1:
                return n  # another leader routes it (and advances "next")
            loads = [self.queued(f) for f in fronts]
            k = choose(router, loads, self._count("router/decisions"), self._count("router/turn/prefill"), loads)
            self.add_queued(fronts[k], int(need[cur]))
            self.post(f"pin/{fronts[k]}", {"rid": cur, "arrival": self.arrival(cur)})
            self.store.add("next", 1)
            n += 1

    def _count(self, key: str) -> int:
        """The next value of a router counter (1 for its first decision)."""
        return int(self.store.add(key, 1))

    def queued(self, front: str) -> int:
        return int(self.store.add(f"queued/{front}", 0))

    def add_queued(self, front: str, n: int) -> None:
        """Prompt tokens routed to a prefill instance (n > 0) or computed there (n < 0)."""
        if n:
            self.store.add(f"queued/{front}", n)

    def route_decode(self, router: str, decoders: list[tuple[str, int]]) -> tuple[str, int]:
        """A prefilled prompt's decode instance (the router on their bound + running requests) and
        DP rank there (vLLM's binding on that instance's counts), counted as bound from now."""
        counts = [[self.counts(name, d) for d in range(dp)] for name, dp in decoders]
        loads = [sum(w + r for w, r in per) for per in counts]
        k = choose(router, loads, self._count("router/decisions"), self._count("router/turn/decode"))
        per = counts[k]
        dp = bind_rank([w for w, _ in per], [r for _, r in per])
        self.add_counts(decoders[k][0], dp, 1, 0)
        return decoders[k][0], dp

    def counts(self, inst: str, dp: int) -> tuple[int, int]:
        """(bound and not running, running) requests of a decode rank."""
        return int(self.store.add(f"bound/{inst}/{dp}", 0)), int(self.store.add(f"run/{inst}/{dp}", 0))

    def add_counts(self, inst: str, dp: int, bound: int, running: int) -> None:
        if bound:
            self.store.add(f"bound/{inst}/{dp}", bound)
        if running:
            self.store.add(f"run/{inst}/{dp}", running)

    def post(self, inst: str, header: dict) -> None:
        n = int(self.store.add(f"inbox/{inst}/n", 1)) - 1
        self.store.set(f"inbox/{inst}/{n}", json.dumps(header))

    def posted(self, inst: str) -> int:
        """Headers posted to an inbox so far."""
        return int(self.store.add(f"inbox/{inst}/n", 0))

    def inbox(self, inst: str, start: int) -> list[dict]:
        """Headers start, start + 1, ... posted so far."""
        n = int(self.store.add(f"inbox/{inst}/n", 0))
        return [json.loads(self.store.get(f"inbox/{inst}/{i}")) for i in range(start, n)]

    def wait_inbox(self, inst: str, index: int, timeout_s: float) -> None:
        """Until header `index` is posted or `timeout_s` passes (polled: a store wait sleeps 10 ms)."""
        key, end = [f"inbox/{inst}/{index}"], time.perf_counter() + timeout_s
        while not self.store.check(key) and time.perf_counter() < end:
            time.sleep(INBOX_POLL_S)

    def finish(self, now: float) -> None:
        """A request finished: closed loop releases the next one; count it."""
        done = int(self.store.add("done", 1))
        if self.concurrency and self.concurrency + done - 1 < self.n:
            self.store.set(f"arr/{self.concurrency + done - 1}", repr(now))

    def all_done(self) -> bool:
        return int(self.store.add("done", 0)) >= self.n
