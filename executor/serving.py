"""Serving-mode scheduling policy: requests -> chunked prefill -> KV hand-off -> continuous decode.

Request lifecycle, mirroring the simulator (sim/prefill.py, sim/decode.py, sim/simulator.py):
  1. a request arrives at its scheduled time (open loop), or when an earlier one finishes (closed
     loop, `concurrency`), and joins a FIFO prefill queue;
  2. each prefill step fills every prefill DP rank up to its token budget and sequence cap
     (the rank with the most budget left takes the next request; a prompt longer than what is
     left is chunked). Unlike the simulator a chunked prompt stays on its rank: its earlier
     chunks' KV lives there;
  3. the step its last chunk runs, its KV goes to the least-loaded decode rank (staged there);
  4. a staged request takes a free decode seat (max_batch_per_rank per rank);
  5. every decode step emits one token per seated request (1 + accepted drafts under
     speculation); the first token is the one of the first decode step after the KV arrived
     (TTFT = queue + prefill + KV transfer + first decode step, as in the simulator); after `osl`
     tokens the request finishes.
Two pieces carry the policy: `PrefillQueue` (one prefill instance's queue, chunks and cache slots)
and `DecodeSeats` (one decode instance's staged requests and seats). `Scheduler` drives both in
lockstep for the colocated engine (serve.py); the disaggregated engine (disagg.py) runs one of
each per instance. All of it is pure Python on host numbers and a caller-supplied clock, so it is
unit-tested without ranks (and calibration/serve_replay.py prices its ticks with the cost model).
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
    last: bool  # the prompt's final chunk (its KV leaves this step)


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
    """One decode sequence in this step: its cache slot and context before this step's tokens."""

    rid: int
    slot: int
    ctx: int
    new: bool  # seated this step: copy its staged KV into the slot first
    left: int = 1  # tokens it still has to emit (a speculative step emits at most this many)


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


class PrefillQueue:
    """One prefill instance: FIFO queue over `ranks` DP ranks, token budget and sequence cap per
    rank per step, one cache slot per sequence in flight (max_seqs + 1 per rank)."""

    def __init__(self, ranks: int, budget: int, max_seqs: int, isl: list[int], cached: list[int]):
        self.ranks, self.budget, self.max_seqs, self.isl, self.cached = ranks, budget, max_seqs, isl, cached
        self.queue: deque[int] = deque()
        self.done_tokens: dict[int, int] = {}
        self.bound: dict[int, tuple[int, int]] = {}  # rid -> (rank, slot) once its first chunk ran
        self.free = [list(range(max_seqs + 1)) for _ in range(ranks)]

    def add(self, rid: int) -> None:
        self.queue.append(rid)

    @property
    def room(self) -> int:
        """New requests the next step could start (free sequence slots over the ranks)."""
        return sum(min(len(f), self.max_seqs) for f in self.free) - sum(rid not in self.bound for rid in self.queue)

    def form(self) -> list[list[Chunk]]:
        """This step's chunks per rank (binds a new prompt to its rank and cache slot)."""
        left = [self.budget] * self.ranks
        seqs = [0] * self.ranks
        chunks: list[list[Chunk]] = [[] for _ in range(self.ranks)]
        for rid in list(self.queue):
            if not any(left[r] > 0 and seqs[r] < self.max_seqs for r in range(self.ranks)):
                break  # every rank's token budget or sequence cap is spent: the rest wait (as vLLM's scheduler)
            r = self._rank_for(rid, left, seqs)
            if r is None:
                continue
            start = self.cached[rid] + self.done_tokens.get(rid, 0)
            take = min(self.isl[rid] - start, left[r])
            if rid not in self.bound:
                self.bound[rid] = (r, self.free[r].pop(0))
            chunks[r].append(Chunk(rid, self.bound[rid][1], start, take, start + take >= self.isl[rid]))
            left[r] -= take
            seqs[r] += 1
        return chunks

    def _rank_for(self, rid: int, left: list[int], seqs: list[int]) -> int | None:
        """A chunked prompt stays on its rank; a new one goes where the most budget is left."""
        ok = [r for r in range(self.ranks) if left[r] > 0 and seqs[r] < self.max_seqs
              and (rid in self.bound or self.free[r])]
        if rid in self.bound:
            return self.bound[rid][0] if self.bound[rid][0] in ok else None
        return max(ok, key=lambda r: (left[r], -r)) if ok else None

    def book(self, chunks: list[list[Chunk]]) -> list[tuple[int, Chunk]]:
        """The step ran: returns (rank, last chunk) of every prompt it finished (slots freed)."""
        finished = []
        for r, per in enumerate(chunks):
            for ch in per:
                if not ch.last:
                    self.done_tokens[ch.rid] = self.done_tokens.get(ch.rid, 0) + ch.take
                    continue
                self.queue.remove(ch.rid)
                self.done_tokens.pop(ch.rid, None)
                self.free[r].append(self.bound.pop(ch.rid)[1])
                finished.append((r, ch))
        return finished


@dataclass
class _Running:
    slot: int
    ctx: int
    left: int  # tokens still to emit
    new: bool = True


class DecodeSeats:
    """One decode instance: staged requests per DP rank (KV arrived or on its way) and seats."""

    def __init__(self, ranks: int, max_batch: int):
        self.ranks, self.max_batch = ranks, max_batch
        self.staged: list[deque[tuple[int, int, int]]] = [deque() for _ in range(ranks)]  # (rid, ctx, osl)
        self.running: list[dict[int, _Running]] = [{} for _ in range(ranks)]
        self.free = [list(range(max_batch)) for _ in range(ranks)]

    def load(self, r: int) -> int:
        return len(self.running[r]) + len(self.staged[r])

    def pick(self) -> int:
        """Least-loaded DP rank (running + staged), lowest index on ties."""
        return min(range(self.ranks), key=lambda r: (self.load(r), r))

    def stage(self, r: int, rid: int, ctx: int, osl: int) -> None:
        self.staged[r].append((rid, ctx, osl))

    @property
    def busy(self) -> bool:
        return any(self.staged) or any(self.running)

    def seat(self) -> list[list[Seat]]:
        """Fill free seats from the staged requests (FIFO per rank); this step's seats per rank."""
        for r in range(self.ranks):
            for s in self.running[r].values():
                s.new = False
            while self.staged[r] and self.free[r]:
                rid, ctx, osl = self.staged[r].popleft()
                self.running[r][rid] = _Running(self.free[r].pop(0), ctx, osl)
        return [[Seat(rid, s.slot, s.ctx, s.new, s.left) for rid, s in run.items()] for run in self.running]

    def book(self, seats: list[list[Seat]], emitted: dict[int, int] | None = None) -> list[tuple[int, int]]:
        """The step ran: each seat emitted `emitted[rid]` tokens (default 1); returns (rank, rid)
        of the requests that finished (their seats freed)."""
        done = []
        for r, per in enumerate(seats):
            for seat in per:
                s = self.running[r][seat.rid]
                n = min(emitted.get(seat.rid, 1) if emitted else 1, s.left)
                s.ctx += n
                s.left -= n
                if s.left <= 0:
                    self.free[r].append(self.running[r].pop(seat.rid).slot)
                    done.append((r, seat.rid))
        return done


@dataclass
class Scheduler:
    """The colocated engine's lockstep policy: one prefill queue and one set of decode seats, ticks
    of prefill step -> KV transfers -> decode step, arrivals and timelines on the caller's clock."""

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
        self.prefill = PrefillQueue(self.n_prefill, self.budget, self.max_seqs, self.isl, self.cached)
        self.decode = DecodeSeats(self.n_decode, self.max_batch)
        self.num_done = 0
        self.ticks = 0

    def arrive(self, now: float) -> None:
        """Queue every request whose arrival time has come."""
        while self.unreleased and self.arrival[self.unreleased[0]] <= now:
            rid = self.unreleased.popleft()
            self.times[rid].arrival = self.arrival[rid]
            self.prefill.add(rid)

    @property
    def finished(self) -> bool:
        return self.num_done == len(self.isl)

    @property
    def busy(self) -> bool:
        return bool(self.prefill.queue) or self.decode.busy

    def next_arrival(self) -> float:
        """Time of the next arrival (NaN: none scheduled yet, closed loop)."""
        return self.arrival[self.unreleased[0]] if self.unreleased else math.nan

    def plan(self, now: float) -> Tick:
        """This tick's prefill chunks, KV transfers and decode seats (booked in `done`)."""
        chunks = self.prefill.form()
        for ch in (c for per in chunks for c in per):
            if math.isnan(self.times[ch.rid].prefill_start):
                self.times[ch.rid].prefill_start = now
        transfers = []
        for r, per in enumerate(chunks):
            for ch in (c for c in per if c.last):
                dst = self.decode.pick()
                self.decode.stage(dst, ch.rid, self.isl[ch.rid], self.osl[ch.rid])
                self.times[ch.rid].decode_rank = dst
                transfers.append(Transfer(ch.rid, r, ch.slot, dst, self.isl[ch.rid]))
        tick = Tick(self.ticks, chunks, transfers, self.decode.seat())
        self.ticks += 1
        return tick

    def done(self, tick: Tick, now: float, prefilled: float = math.nan, kv_transfer_s: float = 0.0,
             emitted: dict[int, int] | None = None) -> list[int]:
        """Book the tick that ended at `now` (its prefill step ended at `prefilled`; NaN: at `now`);
        `emitted`: tokens per decoding request (speculation; default 1). Returns the finished ids."""
        for r, per in enumerate(tick.prefill):
            for ch in per:
                self.times[ch.rid].prefill_rank = r
        for _, ch in self.prefill.book(tick.prefill):
            self.times[ch.rid].prefill_done = now if math.isnan(prefilled) else prefilled
        for tr in tick.transfers:
            self.times[tr.rid].kv_transfer_s = kv_transfer_s
        for per in tick.decode:
            for seat in per:
                if math.isnan(self.times[seat.rid].first_token):
                    self.times[seat.rid].first_token = now
        finished = [rid for _, rid in self.decode.book(tick.decode, emitted)]
        for rid in finished:
            self.times[rid].finish = now
            self.num_done += 1
            if self.concurrency and self.unreleased:  # closed loop: the next request arrives now
                self.arrival[self.unreleased[0]] = now
        return finished
