"""The control plane of disaggregated serving, on the run's c10d store (the TCPStore of the local
launcher or of torchrun): arrivals (a closed loop's are published when a request finishes; paced
bursts are released by the prefill leader, the only one that reads them), the
router's claims (request r is offered to prefill instance r mod n first, taken by another only
while that one is busy; an atomic add on claim/<rid> decides a race), decode load per decode
rank (running + staged), and one KV inbox per decode instance (headers: request, source rank,
length, first token).
"""
from __future__ import annotations

import json
import math
import time

import numpy as np

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

    def claim(self, now: float, room: int, front: int, fronts: int) -> list[tuple[int, float]]:
        """Prefill instance `front` of `fronts` takes up to `room` arrived requests in arrival order:
        [(rid, arrival)]. Request r is first offered to instance r mod fronts; another instance takes
        it only while that one is busy (least loaded, ties round-robin, as the simulator's router)."""
        out = []
        while len(out) < room:
            cur = self.next_unclaimed()
            if cur >= self.n or not self.arrival(cur) <= now:
                break
            owner = cur % fronts
            if owner != front and not self.busy(owner):
                break  # its idle owner takes it
            if int(self.store.add(f"claim/{cur}", 1)) != 1:
                break  # another instance owns it (and advances "next"): try again next step
            self.store.add("next", 1)
            out.append((cur, self.arrival(cur)))
        return out

    def set_busy(self, front: int, busy: bool) -> None:
        self.store.add(f"busy/{front}", 1 if busy else -1)  # a counter: one store op either way

    def busy(self, front: int) -> bool:
        return int(self.store.add(f"busy/{front}", 0)) > 0

    def load(self, inst: str, dp: int) -> int:
        return int(self.store.add(f"load/{inst}/{dp}", 0))

    def add_load(self, inst: str, dp: int, n: int) -> None:
        self.store.add(f"load/{inst}/{dp}", n)

    def post(self, inst: str, header: dict) -> None:
        n = int(self.store.add(f"inbox/{inst}/n", 1)) - 1
        self.store.set(f"inbox/{inst}/{n}", json.dumps(header))

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
