"""Serving-mode scheduler (rank 0): requests -> chunked prefill -> KV hand-off -> continuous decode.

Request lifecycle, mirroring the simulator (sim/prefill.py, sim/decode.py, sim/simulator.py):
  1. a request arrives at its scheduled time (open loop), or when an earlier one finishes (closed
     loop, `concurrency`), and joins the FIFO prefill queue;
  2. each tick's prefill step fills every prefill DP rank up to its token budget and sequence cap
     (the rank with the most budget left takes the next request; a prompt longer than what is
     left is chunked). Unlike the simulator a chunked prompt stays on its rank: its earlier
     chunks' KV lives there;
  3. the tick its last chunk runs, its KV goes to the least-loaded decode rank (staged there);
  4. a staged request takes a free decode seat (max_batch_per_rank per rank) in the same tick;
  5. every decode step emits one token per seated request; the first token is the one of the
     first decode step after the KV arrived (TTFT = queue + prefill + KV transfer + first decode
     step, as in the simulator); after `osl` decode steps the request finishes.
The scheduler is pure Python on host numbers and a caller-supplied clock, so it is unit-tested
without ranks; serve.py runs its ticks on real ranks.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Chunk:
    """Prefill work of one sequence on one prefill rank: tokens start..start+take of the prompt."""

    rid: int
    slot: int  # prefill cache slot on that rank
    start: int
    take: int
    last: bool  # the prompt's final chunk (its KV leaves this tick)


@dataclass(frozen=True)
class Transfer:
    """KV of a prefilled prompt: prefill rank `src` (cache slot) -> decode rank `dst` (staged)."""

    rid: int
    src: int
    src_slot: int
    dst: int
    length: int  # tokens of KV


@dataclass(frozen=True)
class Seat:
    """One decode sequence in this tick's step: its cache slot and context before this token."""

    rid: int
    slot: int
    ctx: int
    new: bool  # seated this tick: copy its staged KV into the slot first


@dataclass(frozen=True)
class Tick:
    """What every rank runs this tick, in order: prefill step, transfers, decode step."""

    index: int
    prefill: list[list[Chunk]]  # [prefill rank] -> chunks
    transfers: list[Transfer]
    decode: list[list[Seat]]  # [decode rank] -> seats

    @property
    def has_prefill(self) -> bool:
        return any(self.prefill)

    @property
    def has_decode(self) -> bool:
        return any(self.decode)


@dataclass
class Timeline:
    """Wall-clock seconds from the run start of one request's events (NaN until they happen)."""

    arrival: float = math.nan
    prefill_start: float = math.nan  # its first prefill step was scheduled
    prefill_done: float = math.nan
    first_token: float = math.nan
    finish: float = math.nan
    kv_transfer_s: float = 0.0
    prefill_rank: int = -1
    decode_rank: int = -1


@dataclass
class _Running:
    slot: int
    ctx: int
    left: int  # tokens still to emit
    new: bool = True


@dataclass
class Scheduler:
    isl: list[int]
    osl: list[int]
    cached: list[int]  # prompt tokens already in the prefix cache (not recomputed)
    arrival: list[float]  # seconds; NaN for closed loop
    n_prefill: int
    budget: int  # prefill tokens per rank per step
    max_seqs: int  # prefill sequences per rank per step
    n_decode: int
    max_batch: int  # decode seats per rank
    concurrency: int = 0  # closed loop: requests in flight (0: open loop)
    times: list[Timeline] = field(init=False)

    def __post_init__(self):
        n = len(self.isl)
        self.times = [Timeline() for _ in range(n)]
        self.unreleased = deque(range(n))
        if self.concurrency:  # closed loop: the first `concurrency` arrive at once
            self.arrival = [0.0 if i < self.concurrency else math.nan for i in range(n)]
        self.queue: deque[int] = deque()
        self.done_tokens: dict[int, int] = {}
        self.bound: dict[int, tuple[int, int]] = {}  # rid -> (prefill rank, slot) once chunked
        self.p_free = [list(range(self.max_seqs + 1)) for _ in range(self.n_prefill)]
        self.staged: list[deque[int]] = [deque() for _ in range(self.n_decode)]
        self.running: list[dict[int, _Running]] = [{} for _ in range(self.n_decode)]
        self.d_free = [list(range(self.max_batch)) for _ in range(self.n_decode)]
        self.num_done = 0
        self.ticks = 0

    # -- arrivals ---------------------------------------------------------------------------
    def arrive(self, now: float) -> None:
        """Queue every request whose arrival time has come."""
        while self.unreleased and self.arrival[self.unreleased[0]] <= now:
            rid = self.unreleased.popleft()
            self.times[rid].arrival = self.arrival[rid]
            self.queue.append(rid)

    @property
    def finished(self) -> bool:
        return self.num_done == len(self.isl)

    @property
    def busy(self) -> bool:
        return bool(self.queue) or any(self.staged) or any(self.running)

    def next_arrival(self) -> float:
        """Time of the next arrival (NaN: none scheduled yet, closed loop)."""
        return self.arrival[self.unreleased[0]] if self.unreleased else math.nan

    # -- one tick ---------------------------------------------------------------------------
    def plan(self, now: float) -> Tick:
        """This tick's prefill chunks, KV transfers and decode seats (state is updated in `done`)."""
        chunks = self._form_prefill()
        for ch in (c for per in chunks for c in per):
            if math.isnan(self.times[ch.rid].prefill_start):
                self.times[ch.rid].prefill_start = now
        transfers = [self._transfer(r, ch) for r, per in enumerate(chunks) for ch in per if ch.last]
        for tr in transfers:
            self.staged[tr.dst].append(tr.rid)
        self._seat()
        decode = [[Seat(rid, s.slot, s.ctx, s.new) for rid, s in run.items()] for run in self.running]
        tick = Tick(self.ticks, chunks, transfers, decode)
        self.ticks += 1
        return tick

    def _form_prefill(self) -> list[list[Chunk]]:
        left = [self.budget] * self.n_prefill
        seqs = [0] * self.n_prefill
        chunks: list[list[Chunk]] = [[] for _ in range(self.n_prefill)]
        for rid in list(self.queue):
            r = self._prefill_rank(rid, left, seqs)
            if r is None:
                continue
            start = self.cached[rid] + self.done_tokens.get(rid, 0)
            take = min(self.isl[rid] - start, left[r])
            if rid not in self.bound:
                self.bound[rid] = (r, self.p_free[r].pop(0))
            chunks[r].append(Chunk(rid, self.bound[rid][1], start, take, start + take >= self.isl[rid]))
            left[r] -= take
            seqs[r] += 1
        return chunks

    def _prefill_rank(self, rid: int, left: list[int], seqs: list[int]) -> int | None:
        """A chunked prompt stays on its rank; a new one goes where the most budget is left."""
        ok = [r for r in range(self.n_prefill) if left[r] > 0 and seqs[r] < self.max_seqs
              and (rid in self.bound or self.p_free[r])]
        if rid in self.bound:
            return self.bound[rid][0] if self.bound[rid][0] in ok else None
        return max(ok, key=lambda r: (left[r], -r)) if ok else None

    def _transfer(self, src: int, ch: Chunk) -> Transfer:
        load = [len(self.running[d]) + len(self.staged[d]) for d in range(self.n_decode)]
        dst = min(range(self.n_decode), key=lambda d: (load[d], d))
        return Transfer(ch.rid, src, ch.slot, dst, self.isl[ch.rid])

    def _seat(self) -> None:
        for d in range(self.n_decode):
            for s in self.running[d].values():
                s.new = False
            while self.staged[d] and self.d_free[d]:
                rid = self.staged[d].popleft()
                self.running[d][rid] = _Running(self.d_free[d].pop(0), self.isl[rid], self.osl[rid])
                self.times[rid].decode_rank = d

    def done(self, tick: Tick, now: float, prefilled: float = math.nan, kv_transfer_s: float = 0.0) -> list[int]:
        """Book the tick that ended at `now` (its prefill step ended at `prefilled`; NaN: at `now`);
        returns the requests that finished."""
        for r, per in enumerate(tick.prefill):
            for ch in per:
                self._prefilled(r, ch, now if math.isnan(prefilled) else prefilled)
        for tr in tick.transfers:
            self.times[tr.rid].kv_transfer_s = kv_transfer_s
        finished = []
        for d, seats in enumerate(tick.decode):
            for seat in seats:
                if self._decoded(d, seat.rid, now):
                    finished.append(seat.rid)
        return finished

    def _prefilled(self, r: int, ch: Chunk, now: float) -> None:
        t = self.times[ch.rid]
        t.prefill_rank = r
        if not ch.last:
            self.done_tokens[ch.rid] = self.done_tokens.get(ch.rid, 0) + ch.take
            return
        t.prefill_done = now
        self.queue.remove(ch.rid)
        self.done_tokens.pop(ch.rid, None)
        self.p_free[r].append(self.bound.pop(ch.rid)[1])

    def _decoded(self, d: int, rid: int, now: float) -> bool:
        s, t = self.running[d][rid], self.times[rid]
        if math.isnan(t.first_token):
            t.first_token = now
        s.ctx += 1
        s.left -= 1
        if s.left > 0:
            return False
        t.finish = now
        self.d_free[d].append(self.running[d].pop(rid).slot)
        self.num_done += 1
        if self.concurrency and self.unreleased:  # closed loop: the next request arrives now
            self.arrival[self.unreleased[0]] = now
        return True
