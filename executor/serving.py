"""Serving mode's scheduling: the serving policy (rackplan/policy) with the executor's cache slots.

Request lifecycle, the simulator's (sim/prefill.py, sim/decode.py, sim/aggregated.py), both drive
the same `EngineCore` per instance (see rackplan/policy for the decisions and why):
  1. a request arrives at its scheduled time (open loop), or when an earlier one finishes (closed
     loop, `concurrency`), goes to a prefill instance by the plan's router and binds to a DP rank;
  2. each prefill step every rank takes chunks from its FIFO queue up to its token budget and
     sequence cap (a prompt longer than what is left continues on the same rank next step), KV
     blocks allocated as chunks run;
  3. the step its last chunk runs, its KV goes to a decode instance (the router) and binds to a
     rank there (staged), its prefill slot freed;
  4. a staged request takes a decode seat when its rank has a seat and KV blocks free;
  5. every decode step emits one token per seated request (1 + accepted drafts under
     speculation); the first token is the one of the first decode step after the KV arrived
     (TTFT = queue + prefill + KV transfer + first decode step, as in the simulator); a rank short
     of blocks preempts its newest sequence, which recomputes its context (prompt + tokens so far)
     as prefill when it is seated again; after `osl` tokens the request finishes.
Aggregated plans run one instance whose ranks take decode seats and prefill chunks in one tick.
`PrefillQueue` and `DecodeSeats` are one instance's policy with the cache slots; `Scheduler` drives
them in lockstep for the colocated (or aggregated) engine (serve.py); the disaggregated engine
(disagg.py) runs one of each per instance. All of it is pure Python on host numbers and a
caller-supplied clock, so it is unit-tested without ranks (and calibration/serve_replay.py prices
its ticks with the cost model).
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

from rackplan.policy import EngineCore
from rackplan.policy.kv import block_tokens, window_tokens
from rackplan.specs import HardwareSpec, ModelSpec, Plan


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
class Kept:
    """A sequence preempted this step: the KV of its full blocks, its old slot's first `tokens`
    positions, stays cached (the policy's `EngineCore.kept`) until it is readmitted."""

    rid: int
    slot: int  # the cache slot it gave back
    tokens: int


@dataclass(frozen=True)
class Tick:
    """What every rank runs this tick, in order: prefill step, transfers, decode step."""

    index: int
    prefill: list[list[Chunk]]  # [prefill rank] -> chunks
    transfers: list[Transfer]
    decode: list[list[Seat]]  # [decode rank] -> seats
    decode_chunks: list[list[Chunk]] = field(default_factory=list)  # [decode rank] -> prefill chunks on it
    # (an aggregated instance's prompts, a preempted sequence's recompute)
    prefill_kept: list[list[Kept]] = field(default_factory=list)  # [prefill rank] -> preempted this step
    decode_kept: list[list[Kept]] = field(default_factory=list)  # [decode rank] -> preempted this step

    @property
    def has_prefill(self) -> bool:
        return any(self.prefill)

    @property
    def has_decode(self) -> bool:
        return any(self.decode) or any(self.decode_chunks)


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


class Slots:
    """Cache slots per DP rank: a running sequence holds one on its rank (lowest free first)."""

    def __init__(self, ranks: int, per_rank: int):
        self.free = [list(range(per_rank)) for _ in range(ranks)]
        self.of: dict[int, int] = {}  # rid -> slot

    def take(self, r: int, rid: int) -> int:
        if rid not in self.of:
            self.of[rid] = self.free[r].pop(0)
        return self.of[rid]

    def give(self, r: int, rid: int) -> None:
        if rid in self.of:
            self.free[r].append(self.of.pop(rid))
            self.free[r].sort()


def give_preempted(slots: Slots, core: EngineCore, preempted: list[int]) -> list[list[Kept]]:
    """Give back the slots of this step's preempted sequences; per rank what each keeps cached
    (the ranks set it aside before the slot is reused: attention.KVCache.keep)."""
    kept: list[list[Kept]] = [[] for _ in range(core.ranks)]
    for rid in preempted:
        r = core.rank_of[rid]
        if rid in slots.of:
            kept[r].append(Kept(rid, slots.of[rid], core.kept.get(rid, 0)))
        slots.give(r, rid)
    return kept


class PrefillQueue:
    """One prefill instance: the policy's prefill engine (rackplan/policy EngineCore) and a cache
    slot per prompt in flight (max_seqs per rank)."""

    def __init__(self, core: EngineCore):
        self.core = core
        self.slots = Slots(core.ranks, core.max_seqs)

    def add(self, rid: int) -> None:
        """A request reaches the instance (it binds to a DP rank at the next step)."""
        self.core.add(rid)

    @property
    def pending(self) -> bool:
        """Prompts queued or part-way."""
        return self.core.busy

    @property
    def all_started(self) -> bool:
        """Every queued prompt has had its first chunk."""
        return self.core.num_waiting == 0

    def form(self) -> list[list[Chunk]]:
        """This step's chunks per rank (a prompt's first chunk takes its cache slot; `kept`: per rank
        the preempted sequences' KV that stays cached)."""
        self.batch = self.core.schedule()
        self.kept = give_preempted(self.slots, self.core, self.batch.preempted)
        done = set(self.batch.completing)
        return [[Chunk(rid, self.slots.take(r, rid), start, take, rid in done) for rid, take, start in per]
                for r, per in enumerate(self.batch.chunks)]

    def book(self, chunks: list[list[Chunk]]) -> list[tuple[int, Chunk]]:
        """The step ran: returns (rank, last chunk) of every prompt it finished (slots freed)."""
        self.core.finish(self.batch)
        finished = [(r, ch) for r, per in enumerate(chunks) for ch in per if ch.last]
        for r, ch in finished:
            self.slots.give(r, ch.rid)
        return finished


class DecodeSeats:
    """One decode (or aggregated) instance: the policy's engine (EngineCore, role decode or both)
    and a cache slot per running sequence. Each step: seats per rank, and the prefill chunks on
    them (an aggregated instance's prompts, a preempted sequence's recompute)."""

    def __init__(self, core: EngineCore):
        self.core = core
        self.slots = Slots(core.ranks, core.max_seqs)

    def stage(self, rid: int, rank: int | None = None) -> None:
        """A prompt's KV arrived (decode) or a request did (aggregated); `rank`: the DP rank the
        prefill side bound it to at hand-off (executor/control.py), else it binds at the next step."""
        if rank is not None:
            self.core.bind(rid, rank)
        self.core.add(rid)

    @property
    def busy(self) -> bool:
        return self.core.busy

    def seat(self) -> list[list[Seat]]:
        """This step's decode seats per rank (`chunks`: its prefill chunks, `kept`: the preempted
        sequences' KV that stays cached, both set alongside)."""
        core = self.core
        self.batch = b = core.schedule()
        self.kept = give_preempted(self.slots, core, b.preempted)
        new, done = set(b.admitted), set(b.completing)
        self.chunks = [[Chunk(rid, self.slots.take(r, rid), start, take, rid in done) for rid, take, start in per]
                       for r, per in enumerate(b.chunks)]
        seats = []
        for r in range(core.ranks):
            per = []
            for rid in core.decoding_on(r):
                ctx, left = core.context(rid)
                left = max(1, math.ceil(left - 1e-9))
                per.append(Seat(rid, self.slots.take(r, rid), int(round(ctx)), rid in new, left))
            seats.append(per)
        return seats

    def book(self, seats: list[list[Seat]], emitted: dict[int, int] | None = None) -> list[tuple[int, int]]:
        """The step ran: each seat emitted `emitted[rid]` tokens (default: the engine's tokens per
        step); returns (rank, rid) of the requests that finished (their slots freed)."""
        rank = {s.rid: r for r, per in enumerate(seats) for s in per}
        rank.update({c.rid: r for r, per in enumerate(self.chunks) for c in per})
        self.done = self.core.finish(self.batch, emitted)
        out = []
        for rid in self.done.finished:
            self.slots.give(rank[rid], rid)
            out.append((rank[rid], rid))
        return out


@dataclass
class Scheduler:
    """The colocated (or aggregated) engine's lockstep policy: ticks of prefill step -> KV transfers
    -> decode step (an aggregated plan: one step of decode seats and prefill chunks on the same
    ranks), arrivals and timelines on the caller's clock. `prefill` is None for an aggregated plan
    (`decode` is then its instance, role 'both')."""

    isl: list[int]
    osl: list[int]
    arrival: list[float]  # seconds; NaN for closed loop
    prefill: PrefillQueue | None
    decode: DecodeSeats
    concurrency: int = 0  # closed loop: requests in flight (0: open loop)
    times: list[Timeline] = field(init=False)

    def __post_init__(self):
        n = len(self.isl)
        self.times = [Timeline() for _ in range(n)]
        self.unreleased = deque(range(n))
        if self.concurrency:  # closed loop: the first `concurrency` arrive at once
            self.arrival = [0.0 if i < self.concurrency else math.nan for i in range(n)]
        self.num_done = 0
        self.ticks = 0

    def arrive(self, now: float) -> None:
        """Queue every request whose arrival time has come."""
        while self.unreleased and self.arrival[self.unreleased[0]] <= now:
            rid = self.unreleased.popleft()
            self.times[rid].arrival = self.arrival[rid]
            if self.prefill is not None:
                self.prefill.add(rid)
            else:
                self.decode.stage(rid)

    @property
    def finished(self) -> bool:
        return self.num_done == len(self.isl)

    @property
    def busy(self) -> bool:
        return (self.prefill is not None and self.prefill.pending) or self.decode.busy

    def next_arrival(self) -> float:
        """Time of the next arrival (NaN: none scheduled yet, closed loop)."""
        return self.arrival[self.unreleased[0]] if self.unreleased else math.nan

    def plan(self, now: float) -> Tick:
        """This tick's prefill chunks, KV transfers and decode seats (booked in `done`)."""
        chunks = self.prefill.form() if self.prefill is not None else [[]]
        last = [(r, ch) for r, per in enumerate(chunks) for ch in per if ch.last]
        for _, ch in last:
            self.decode.stage(ch.rid)  # it binds to a decode rank as the decode step is formed
        seats = self.decode.seat()
        rank_of = self.decode.core.rank_of
        transfers = [Transfer(ch.rid, r, ch.slot, rank_of[ch.rid], self.isl[ch.rid]) for r, ch in last]
        for r, per in enumerate(chunks):
            for ch in per:
                self.times[ch.rid].prefill_rank = r
        for r, per in enumerate(self.decode.chunks):
            for ch in per:
                self.times[ch.rid].decode_rank = r
        for tr in transfers:
            self.times[tr.rid].decode_rank = tr.dst
        for ch in (c for per in chunks + self.decode.chunks for c in per):
            if math.isnan(self.times[ch.rid].prefill_start):
                self.times[ch.rid].prefill_start = now
        tick = Tick(self.ticks, chunks, transfers, seats, self.decode.chunks,
                    self.prefill.kept if self.prefill is not None else [[]], self.decode.kept)
        self.ticks += 1
        return tick

    def done(self, tick: Tick, now: float, prefilled: float = math.nan, kv_transfer_s: float = 0.0,
             emitted: dict[int, int] | None = None) -> list[int]:
        """Book the tick that ended at `now` (its prefill step ended at `prefilled`; NaN: at `now`);
        `emitted`: tokens per decoding request (speculation; default: the engine's). Returns the
        finished ids."""
        if self.prefill is not None:
            for _, ch in self.prefill.book(tick.prefill):
                self.times[ch.rid].prefill_done = now if math.isnan(prefilled) else prefilled
        for tr in tick.transfers:
            self.times[tr.rid].kv_transfer_s = kv_transfer_s
        for per in tick.decode:
            for seat in per:
                if math.isnan(self.times[seat.rid].first_token):
                    self.times[seat.rid].first_token = now
        finished = [rid for _, rid in self.decode.book(tick.decode, emitted)]
        for rid in self.decode.done.first:  # aggregated: the last prefill chunk emitted the first token
            self.times[rid].prefill_done = self.times[rid].first_token = now
        for rid in finished:
            self.times[rid].finish = now
            self.num_done += 1
            if self.concurrency and self.unreleased:  # closed loop: the next request arrives now
                self.arrival[self.unreleased[0]] = now
        return finished


def engines(plan: Plan, model: ModelSpec, hw: HardwareSpec, isl: list[int], osl: list[int], cached: list[int],
            ) -> tuple[PrefillQueue | None, DecodeSeats]:
    """The policy of a plan's first prefill and decode (or aggregated) instance, KV blocks per rank
    from the memory model (sim/deployment.validate_plan: the simulator's capacity)."""
    from rackplan.sim.deployment import validate_plan

    caps, kind = validate_plan(plan, model, hw), model.attention.kind
    window = window_tokens(model, block_tokens(kind))
    if not plan.disaggregated:
        lay = plan.aggregated[0]
        return None, DecodeSeats(EngineCore.for_layout(lay, caps["aggregated[0]"], kind, isl, osl, cached,
                                                       window=window))
    pre = EngineCore.for_layout(plan.prefill[0], caps["prefill[0]"], kind, isl, osl, cached, window=window)
    dec = EngineCore.for_layout(plan.decode[0], caps["decode[0]"], kind, isl, osl, cached, window=window)
    return PrefillQueue(pre), DecodeSeats(dec)


class PrefillLeader:
    """A disaggregated prefill instance's scheduling (its leader's, disagg.py), on the run's control
    plane (`control`: executor/control.Control): it routes arrived requests to prefill instances
    (any leader may: the plan's router on the instances' queued prompt tokens), takes those routed
    to it, forms each step, and sends each finished prompt to a decode instance and rank (the
    router again, then vLLM's rank binding on that instance's counts)."""

    def __init__(self, name: str, queue: PrefillQueue, control, router: str, fronts: list[str],
                 decoders: list[tuple[str, int]], need: Sequence[int]):
        self.name, self.queue, self.control, self.router = name, queue, control, router
        self.fronts, self.decoders, self.need = fronts, decoders, need  # need: prompt tokens to compute per rid
        self.seen = 0  # routed requests read from this instance's queue
        self.published = 0  # the policy's queued prompt tokens as last published (less what the router added)

    def take(self, now: float) -> list[tuple[int, float]]:
        """Route what has arrived, then add what was routed here: [(rid, arrival)]."""
        ctl = self.control
        if ctl.paced and self.queue.all_started:
            ctl.release(now)  # every queued prompt has started: the next burst arrives
        ctl.route(now, self.router, self.fronts, self.need)
        heads = ctl.inbox(f"pin/{self.name}", self.seen)
        self.seen += len(heads)
        for h in heads:
            self.queue.add(h["rid"])
            self.published += int(self.need[h["rid"]])  # the router counted these on the store
        return [(h["rid"], h["arrival"]) for h in heads]

    @property
    def finished(self) -> bool:
        ctl = self.control
        return not self.queue.pending and ctl.next_unclaimed() >= ctl.n and ctl.posted(f"pin/{self.name}") == self.seen

    def form(self) -> list[list[Chunk]]:
        return self.queue.form()

    def target(self) -> tuple[str, int]:
        """A finished prompt's decode instance and DP rank (counted there as bound from now)."""
        return self.control.route_decode(self.router, self.decoders)

    def book(self, chunks: list[list[Chunk]], aside=nullcontext) -> list[tuple[int, Chunk]]:
        """The step ran: the instance's queued prompt tokens (the router's load) follow the policy's
        (`aside()` wraps the store work)."""
        done = self.queue.book(chunks)
        now = self.queue.core.queued_tokens
        with aside():
            self.control.add_queued(self.name, now - self.published)
        self.published = now
        return done


class DecodeLeader:
    """A disaggregated decode instance's scheduling (its leader's, disagg.py): stages the prompts
    whose KV headers reached its inbox on the rank the prefill side bound them to, seats them, and
    keeps its per-rank counts (bound, running) on the control plane for the router."""

    def __init__(self, name: str, seats: DecodeSeats, control):
        self.name, self.seats, self.control = name, seats, control
        self.seen = 0
        ranks = seats.core.ranks
        self.published = [(0, 0)] * ranks  # (waiting, running) per rank as last published
        self.staged = [0] * ranks  # staged since: already counted as bound by the prefill side

    def take(self) -> list[dict]:
        """KV headers posted since the last look, each request staged on its bound rank."""
        heads = self.control.inbox(self.name, self.seen)
        self.seen += len(heads)
        for h in heads:
            self.seats.stage(h["rid"], h["dp"])
            self.staged[h["dp"]] += 1
        return heads

    def seat(self, aside=nullcontext) -> list[list[Seat]]:
        """This step's seats (and recompute chunks: `seats.chunks`); `aside()` wraps the store work."""
        seats = self.seats.seat()
        with aside():
            self.publish()
        return seats

    def book(self, seats: list[list[Seat]], emitted: dict[int, int] | None = None,
             aside=nullcontext) -> list[tuple[int, int]]:
        done = self.seats.book(seats, emitted)
        with aside():
            self.publish()
        return done

    def publish(self) -> None:
        """Per rank the change of waiting and running requests since the last publish (a request
        staged meanwhile was counted as bound already)."""
        core = self.seats.core
        for r in range(core.ranks):
            now = (len(core.waiting[r]), len(core.running[r]))
            dw, dr = now[0] - self.published[r][0] - self.staged[r], now[1] - self.published[r][1]
            if dw or dr:
                self.control.add_counts(self.name, r, dw, dr)
            self.published[r], self.staged[r] = now, 0
