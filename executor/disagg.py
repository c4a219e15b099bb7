"""Disaggregated serving on real ranks: every prefill and decode replica of the plan runs its own
loop on its own ranks and process groups, at the same time, and each prompt's KV cache goes from
its prefill rank to its decode rank point-to-point (kv.py).

Request lifecycle (the simulator's, sim/simulator.py; both drive the serving policy, rackplan/policy,
through serving.py's PrefillLeader and DecodeLeader):
  1. requests arrive on the wall clock (open loop) or when one finishes (closed loop);
  2. router: any prefill leader routes an arrived request (an atomic add on the run's store decides
     a race) with the plan's router over the prefill instances' queued prompt tokens (store
     counters), into the chosen instance's queue, where it binds to a DP rank (vLLM's balancer);
  3. the prefill leader (local rank 0) forms each step's chunks and broadcasts them to its
     instance; the step a prompt's last chunk runs, the leader picks its decode instance (the
     router) and rank (vLLM's binding on that instance's bound + running counts), the prefill rank
     isends the KV and posts a header (request, rank, source rank, length, first token) in that
     decode instance's inbox;
  4. the decode leader reads its inbox each step, stages each request on its rank, seats those
     whose KV blocks are free and broadcasts the step; a newly seated request's decode rank
     receives its KV first (timed as `kv.transfer`), a preempted one recomputes its context, then
     every seated request emits 1 token (1 + accepted drafts under speculation); the first decode
     step after the KV arrived gives the first token (TTFT).
Every rank keeps its own clock from a common start barrier (one machine: the same monotonic
clock); rank 0 gathers step records, request timelines and expert counts at the end. With async
scheduling a leader plans step n + 1 on a worker thread while step n runs (the plan cannot depend
on step n's tokens: a request's emitted count is known when its step is issued).
"""
from __future__ import annotations

import gc
import math
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from rackplan.policy import EngineCore
from rackplan.policy.kv import block_tokens, window_tokens
from rackplan.sim.deployment import validate_plan
from rackplan.sim.workload import make_requests
from rackplan.specs import load_workload
from rackplan.specs.ops import HOST_PARTS

from .attention import sub_seed
from .control import Control
from .kv import KVLinks, check_kv_layouts, dest_ranks, source_rank
from .model import Batch, layer_ids
from .probe import InPlace, probe_record
from .records import request_record, step_records
from .serve import Instance, prompt_tokens
from .serving import DecodeLeader, DecodeSeats, PrefillLeader, PrefillQueue, Timeline
from .speculate import accept, draw_accepted, verify_batch
from .step_shape import StepShape
from .timing import HostClock, NullTimer
from .topology import make_groups, max_ranks, serving_instances

IDLE_POLL_S = 1.0  # longest an idle leader waits before it tells its instance it is still alive
POLL_S = 0.002  # an idle prefill leader's look at the clock when the next arrival is not known yet


@dataclass
class Tick:
    index: int
    work: list  # per DP rank: prefill Chunks or decode Seats
    extra: dict = field(default_factory=dict)  # prefill: rid -> (decode instance, dp); decode: rid -> header
    accepted: dict = field(default_factory=dict)  # decode + speculation: rid -> drafts kept
    chunks: list = field(default_factory=list)  # decode: per DP rank, recompute chunks of preempted sequences
    kept: list = field(default_factory=list)  # per DP rank: serving.Kept of the sequences preempted this step
    admitted: int = 0  # requests the scheduler took in this step (claimed prompts, newly seated decodes)
    waiting: int = 0  # requests it left waiting (queued prompts not scheduled, staged decodes without a seat)
    idle_s: float = 0.0  # wall seconds the leader waited idle (no work) since its previous step
    probe: bool = False  # every rank of the instance probes its CPU speed before this step (executor/probe.py)


def _counts(tick: Tick) -> dict:
    """The step's request bookkeeping as record shape fields (untimed): admitted, left waiting, and the
    idle wait before it (a step after one runs its host code colder: calibration/host_fit.py)."""
    return {"admitted_global": tick.admitted, "waiting_global": tick.waiting, "idle_before_s": round(tick.idle_s, 6)}


class _GCCount:
    """Garbage collections of this process so far (a gc callback): each step's host records say how
    many ran during the step, a pause inside whichever host part happened to trigger it."""

    def __init__(self):
        self.collections = 0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict) -> None:
        self.collections += phase == "start"


GC = _GCCount()


class Loop:
    """One instance's loop on one rank: the leader plans and broadcasts, every rank steps.

    Host parts of each step (rackplan/specs/ops.py HOST_PARTS, sim/cost/host.py prices them): the
    leader times host.schedule (plan, less its control-plane store round trips: Loop.aside),
    host.dp_sync (the tick's broadcast and the instance barrier before the forward) and host.output
    (booking the step's tokens: appended, finished, seats freed; the executor's timelines, router
    load counts and KV sends after it are no engine host work); every rank times
    host.prepare and host.sample (Instance.record). The leader schedules and books every DP rank of
    the instance: a central scheduler (the profile's host.scheduler 'central')."""

    def __init__(self, eng, rg, inst_obj: Instance):
        self.eng, self.me, self.rg, self.inst = eng, eng.me, rg, inst_obj
        self.leader = rg.local == 0
        self.lay = rg.inst.layout
        self.pool = ThreadPoolExecutor(1) if self.lay.async_scheduling and self.leader else None
        self.pending = None
        self.ticks = 0
        self.exposed_s = 0.0
        self.aside_s = [0.0, 0.0]  # wall, CPU of the last plan's work that is no scheduler work (Loop.aside)
        self.idle_s = 0.0  # the leader's idle waits since its last step
        self.probes = InPlace(eng.me.base, eng.me.dtype_name)  # the rig's speed, in place (the leader says when)

    def _plan_timed(self):
        """(the next tick or None, wall and CPU seconds the scheduler took): the tick's
        host.schedule, less what plan() ran inside `aside`."""
        self.aside_s = [0.0, 0.0]
        t0, c0 = time.perf_counter(), time.thread_time()
        tick = self.plan()
        return tick, time.perf_counter() - t0 - self.aside_s[0], time.thread_time() - c0 - self.aside_s[1]

    @contextmanager
    def aside(self):
        """Leave the body out of host.schedule: work plan() does that is no engine scheduler work:
        the serving control plane's store round trips (the router and the API server's request
        hand-off stand-ins) and the drawn acceptance of a speculative step (the device's
        verification outcome, drawn here because random weights accept nothing)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.aside_s[0] += time.perf_counter() - t0
            self.aside_s[1] += time.thread_time() - c0

    def _message(self):
        """Leader: the next ("tick", t) / ("idle", None) / ("stop", None); the others receive it."""
        if self.leader:
            t0 = time.perf_counter()
            tick, sched_s, sched_cpu = self.pending.result() if self.pending is not None else self._plan_timed()
            self.pending = None
            if tick is None:
                msg = ("stop", None) if self.finished() else ("idle", None)
                if msg[0] == "idle":
                    self.idle_wait()
                    self.idle_s += time.perf_counter() - t0
            else:
                tick.idle_s, self.idle_s = self.idle_s, 0.0
                tick.probe = self.probes.due(now_s=self.eng.clock())
                msg = ("tick", tick)
                self.inst.clock.add("host.schedule", sched_s, sched_cpu)
            self.exposed_s = time.perf_counter() - t0
        if self.rg.instance is None:
            return msg
        box = [msg if self.leader else None]
        with self.inst.clock.part("host.dp_sync"):
            dist.broadcast_object_list(box, src=self.rg.inst.first, group=self.rg.instance)
        return box[0]

    def run(self) -> None:
        """The instance's loop on this rank until the leader says stop: get the step (the leader plans
        it with the serving policy and broadcasts it to the instance's ranks; host.schedule and
        host.dp_sync timed), run it on this rank (`step`), book its tokens on the leader (host.output;
        under async scheduling first, with the next step planned on a worker thread meanwhile), then
        the executor's own bookkeeping (`after`: timelines, router load, KV sends) and this step's
        host-part records."""
        self.me.fault("step")  # test hook: at the loop's start (an instance the router skips still fails)
        while True:
            t_loop, self.gc_start = time.perf_counter(), GC.collections
            self.inst.clock = HostClock()
            kind, tick = self._message()
            if kind == "stop":
                break
            if kind == "idle":
                continue
            if tick.probe:  # between two steps, on every rank of the instance; its time is in no step's record
                rec, probe_s = self.probes.probe(tick.index, self.eng.clock())
                self.eng.records.append(rec)
                t_loop += probe_s
            clock = self.inst.clock
            if self.pool is not None:  # book now, plan the next step during this one's device work
                with clock.part("host.output"):
                    self.book(tick)
                self.pending = self.pool.submit(self._plan_timed)
            step_s = self.step(tick)
            if self.pool is None and self.leader:
                with clock.part("host.output"):
                    self.book(tick)
            self.after(tick)  # the executor's own bookkeeping (timelines, router load, KV sends): no host part
            self._record_host(clock)
            self.ticks += 1
            if self.leader:  # engine-loop time of this step outside the step's own record
                self.eng.iteration(self.rg, tick, time.perf_counter() - t_loop - step_s)
        if self.pool is not None:
            self.pool.shutdown()

    def _record_host(self, clock: HostClock) -> None:
        """The host parts of the step just run, as records of that step (seconds: wall; cpu_s: this
        thread's CPU time): every rank's host.prepare and host.sample, the leader's host.schedule,
        host.dp_sync (the tick's broadcast and the barrier: what it waited for the others) and
        host.output."""
        names = HOST_PARTS if self.leader else ("host.prepare", "host.sample")
        sec = {n: clock.wall[n] for n in names if n in clock.wall}
        inst = self.inst
        recs = step_records(self.me.base, inst.role, self.lay, inst.steps - 1, sec, inst.last_shape,
                            self.me.dtype_name, inst.n_dense, inst.n_moe)
        gcs = GC.collections - self.gc_start  # garbage collections during the step (any part, or between)
        self.eng.records += [dict(r, cpu_s=clock.cpu[r["op"]], gc=gcs) for r in recs]


class PrefillLoop(Loop):
    def __init__(self, eng, rg):
        lay = rg.inst.layout
        super().__init__(eng, rg, Instance(eng.me, rg, lay.max_batch_per_rank + 1, max(eng.isl), time_shared=False))
        self.sched = PrefillLeader(rg.inst.name, PrefillQueue(eng.core(rg.inst)), eng.control, eng.me.plan.router,
                                   eng.fronts, [(d.name, d.layout.dp) for d in eng.decoders], eng.need) \
            if self.leader else None
        self.first_tokens: dict[int, int] = {}

    def finished(self) -> bool:
        return self.sched.finished

    def idle_wait(self) -> None:
        ctl, now = self.eng.control, self.eng.clock()
        nxt = ctl.next_unclaimed()
        wait = ctl.arrival(nxt) - now if nxt < ctl.n else 0.0
        time.sleep(min(IDLE_POLL_S, wait, POLL_S * 5) if math.isfinite(wait) and wait > 0 else POLL_S)

    def plan(self):
        now = self.eng.clock()
        with self.aside():  # the load generator and the router: no scheduler work
            taken = self.sched.take(now)
        for rid, arrival in taken:
            self.eng.times(rid).arrival = arrival
        if not self.sched.queue.pending:
            return None
        chunks = self.sched.form()
        core = self.sched.queue.core
        targets = {}
        for ch in (c for per in chunks for c in per):
            tl = self.eng.times(ch.rid)
            if math.isnan(tl.prefill_start):
                tl.prefill_start, tl.prefill_rank = now, self.rg.inst.first + self._dp_of(chunks, ch) * self.lay.tp
            if ch.last:
                with self.aside():  # the router's choice, on the control plane's counts
                    targets[ch.rid] = self.sched.target()
        return Tick(self.ticks, chunks, targets, admitted=len(taken), waiting=core.num_waiting,
                    kept=self.sched.queue.kept)

    @staticmethod
    def _dp_of(chunks, ch) -> int:
        return next(d for d, per in enumerate(chunks) if ch in per)

    def book(self, tick: Tick) -> None:
        self.sched.book(tick.work, self.aside)

    def step(self, tick: Tick) -> float:
        me, chunks = self.me, tick.work[self.rg.dp_rank]
        self.inst.cache.keep(tick.kept[self.rg.dp_rank], chunks)  # preempted: KV set aside; readmitted: back
        # the chunks' token ids: the request's input (a tokenizer's output in an engine), drawn here as a
        # stand-in: no input preparation (drawing a whole prompt per chunk priced its full length, not the chunk's)
        parts = [self.eng.prompt(c.rid)[c.start:c.start + c.take] for c in chunks]
        t0, c0 = time.perf_counter(), time.thread_time()
        toks = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        slots = torch.tensor([c.slot for c in chunks], dtype=torch.long, device=me.device)
        batch = Batch.prefill(toks.to(me.device), [c.take for c in chunks], slots, [c.start for c in chunks])
        prep_s = time.perf_counter() - t0  # host.prepare: the step's inputs; the record's shape below is untimed
        self.inst.clock.add("host.prepare", prep_s, time.thread_time() - c0)
        shape = StepShape.prefill([c.take for c in chunks], [c.start for c in chunks]).with_extra(
            tokens_global=sum(c.take for per in tick.work for c in per), seqs_global=sum(len(per) for per in tick.work),
            emitted_global=sum(c.last for per in tick.work for c in per), spec_depth=0,
            finished_global=sum(c.last for per in tick.work for c in per), **_counts(tick))
        sec, ids = self.inst.forward(batch, lambda logits: logits.argmax(-1).tolist(),
                                     rank_tokens=[sum(c.take for c in per) for per in tick.work], has_prefill=True)
        self.done_at = self.eng.clock()  # the prompts' last chunks are done (their KV leaves next)
        for c, tok in zip(chunks, ids, strict=True):
            if c.last:
                self.first_tokens[c.rid] = tok
        self.eng.records += self.inst.record(sec, shape, prep_s, self.exposed_s if self.leader else prep_s)
        self.eng.trace(self.inst)
        return sec["step"]

    def after(self, tick: Tick) -> None:
        """Send the KV of every prompt this rank's DP rank finished, then post its header."""
        d, t = self.rg.dp_rank, self.rg.tp_rank
        for ch in (c for c in tick.work[d] if c.last):
            name, dp = tick.extra[ch.rid]
            dec = self.eng.instances[name]
            kv = torch.stack([x[ch.slot, :self.eng.isl[ch.rid]] for x in self.inst.cache.data])  # [layers, L, D]
            for dst in dest_ranks(self.lay.tp, t, dec, dp):
                self.eng.sends.append((self.eng.links.send(kv, dst, ch.rid), kv))
            tok = self.first_tokens.pop(ch.rid)
            if t == 0:
                now = self.done_at
                self.eng.checksums.append((ch.rid, "kv_checksum_sent", kv.sum()))  # read after the run
                self.eng.times(ch.rid).prefill_done = now
                self.eng.control.post(name, {"rid": ch.rid, "dp": dp, "prefill": self.rg.inst.name, "src_dp": d,
                                             "length": self.eng.isl[ch.rid], "token": tok, "prefill_done": now})


class DecodeLoop(Loop):
    def __init__(self, eng, rg):
        lay = rg.inst.layout
        max_ctx = max(i + o for i, o in zip(eng.isl, eng.osl, strict=True)) + lay.queries_per_step + 1
        super().__init__(eng, rg, Instance(eng.me, rg, lay.max_batch_per_rank, max_ctx, time_shared=False))
        self.sched = DecodeLeader(rg.inst.name, DecodeSeats(eng.core(rg.inst)), eng.control) if self.leader else None
        self.heads: dict[int, dict] = {}  # rid -> KV header of a staged request
        self.booked: list[tuple[int, int]] = []
        # each seat's last token stays on the device (no host read of sampled tokens per step);
        # the emitted tokens are read once, after the run (`outputs`)
        self.last = torch.zeros(lay.max_batch_per_rank, dtype=torch.long, device=eng.me.device)
        self.outputs: list[tuple[list[int], object]] = []  # (request ids, tokens [B] or per-request lists)
        self.first: dict[int, int] = {}  # rid -> the token its prefill sampled (a recompute reads it)
        self.drafter = eng.me.drafter(lay, lay.max_batch_per_rank, max_ctx)
        self.rng = np.random.default_rng(sub_seed(eng.me.cfg.seed, "accept", rg.inst.name))

    def finished(self) -> bool:
        return self.eng.control.all_done()

    def idle_wait(self) -> None:
        self.eng.control.wait_inbox(self.rg.inst.name, self.sched.seen, IDLE_POLL_S)

    def plan(self):
        with self.aside():
            heads = self.sched.take()
        for h in heads:
            self.heads[h["rid"]] = h
        if not self.sched.seats.busy:
            return None
        seats = self.sched.seat(self.aside)
        chunks = self.sched.seats.chunks
        handoffs = {s.rid: self.heads.pop(s.rid) for per in seats for s in per if s.new}
        if not any(seats) and not any(chunks):
            return None  # every rank's head waits for KV blocks
        sp = self.lay.speculation
        accepted = {}
        if sp is not None:
            with self.aside():
                flat = [s.rid for per in seats for s in per]
                accepted = dict(zip(flat, draw_accepted(self.rng, len(flat), sp.num_tokens,
                                                        self.me.acceptance(self.lay)), strict=True))
        return Tick(self.ticks, seats, handoffs, accepted, admitted=len(handoffs),
                    waiting=self.sched.seats.core.num_waiting, chunks=chunks, kept=self.sched.seats.kept)

    def book(self, tick: Tick) -> None:
        emitted = {rid: 1 + a for rid, a in tick.accepted.items()} or None
        self.booked = self.sched.book(tick.work, emitted, self.aside)

    def step(self, tick: Tick) -> float:
        me, seats = self.me, tick.work[self.rg.dp_rank]
        self.inst.cache.keep(tick.kept[self.rg.dp_rank], tick.chunks[self.rg.dp_rank] if tick.chunks else [])
        for s in seats:
            if s.new:
                self._install(s, tick.extra[s.rid])
        # every rank of the instance steps when any recomputes (EP collectives), chunks or not
        recompute_s = self._recompute(tick.chunks[self.rg.dp_rank], [sum(c.take for c in per) for per in tick.chunks]) \
            if tick.chunks and any(tick.chunks) else 0.0
        t0, c0 = time.perf_counter(), time.thread_time()
        dev = me.device
        slots = torch.tensor([s.slot for s in seats], dtype=torch.long, device=dev)
        last = self.last[slots]
        ctx = [s.ctx for s in seats]
        prep_s = time.perf_counter() - t0  # host.prepare: the step's inputs (slots, last tokens, contexts)
        self.inst.clock.add("host.prepare", prep_s, time.thread_time() - c0)
        q = self.lay.queries_per_step
        seqs_global = sum(len(per) for per in tick.work)  # the record's shape: instrumentation, untimed
        rank_tokens = [len(per) * q for per in tick.work]  # every DP rank's query tokens (DBO's split)
        shape = StepShape.decode(ctx, q).with_extra(
            tokens_global=seqs_global * q, seqs_global=seqs_global, spec_depth=q - 1,
            emitted_global=sum(min(1 + tick.accepted.get(s.rid, 0), s.left) for per in tick.work for s in per),
            finished_global=sum(1 + tick.accepted.get(s.rid, 0) >= s.left for per in tick.work for s in per),
            **_counts(tick))
        if self.drafter is None:
            sec, nxt = self.inst.forward(Batch.decode(last, ctx, slots), lambda logits: logits.argmax(-1),
                                         rank_tokens=rank_tokens)
            self.done_at = self.eng.clock()  # this step's tokens exist now
            self.last[slots] = nxt
            self.outputs.append(([s.rid for s in seats], nxt))
            shape = shape.with_extra(tokens_emitted=len(seats))
        else:
            def device_step(timer):
                drafts = self.drafter.propose(last, ctx, slots, timer)
                logits = self.inst.model.forward(verify_batch(last, drafts, ctx, slots), self.inst.cache, timer)
                with timer.section("host", host=True), self.inst.clock.part("host.sample"):  # rejection sampling
                    return accept(logits, drafts, [tick.accepted[s.rid] for s in seats])
            sec, spec = self.inst.forward(None, lambda out: out, device_step, rank_tokens=rank_tokens)
            self.done_at = self.eng.clock()
            shape = shape.with_extra(accepted=spec.accepted, greedy_accepted=spec.greedy, acceptance="drawn",
                                     spec_depth=q - 1)
            ids = [toks[:s.left] for s, toks in zip(seats, spec.emitted, strict=True)]  # a request stops at its osl
            shape = shape.with_extra(tokens_emitted=sum(len(t) for t in ids))
            self.last[slots] = torch.tensor([t[-1] for t in ids], dtype=torch.long, device=dev)  # [B] (B may be 0)
            self.outputs.append(([s.rid for s in seats], ids))
        self.eng.records += self.inst.record(sec, shape, prep_s, self.exposed_s if self.leader else prep_s)
        self.eng.trace(self.inst)
        return sec["step"] + recompute_s

    def _recompute(self, chunks, rank_tokens: list[int]) -> float:
        """Recompute preempted sequences' KV on this rank (vLLM V1's recompute preemption): their
        tokens so far (prompt, the prefill's token, what this rank emitted) as prefill chunks in
        their new slots, from what stayed cached (KVCache.keep copied it in); the last chunk restores
        the sequence's last token. Returns the step's seconds."""
        me = self.me
        seqs = {c.rid: self._sequence(c.rid) for c in chunks}
        parts = [seqs[c.rid][c.start:c.start + c.take] for c in chunks]
        toks = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        slots = torch.tensor([c.slot for c in chunks], dtype=torch.long, device=me.device)
        batch = Batch.prefill(toks.to(me.device), [c.take for c in chunks], slots, [c.start for c in chunks])
        sec, _ = self.inst.forward(batch, lambda logits: None, rank_tokens=rank_tokens, has_prefill=True)
        for c in (c for c in chunks if c.last):
            self.last[c.slot] = int(seqs[c.rid][-1])
        shape = StepShape.prefill([c.take for c in chunks], [c.start for c in chunks]).with_extra(recompute=True)
        self.eng.records += self.inst.record(sec, shape, 0.0)
        return sec["step"]

    def _sequence(self, rid: int) -> torch.Tensor:
        """A request's tokens so far on this rank: prompt, the prefill's token, the decode steps'."""
        out = [self.first[rid]]
        for rids, toks in self.outputs:
            if rid in rids:
                t = toks[rids.index(rid)]
                out += [int(x) for x in t] if isinstance(t, list) else [int(t)]
        return torch.cat([self.eng.prompt(rid), torch.tensor(out, dtype=torch.long)])

    def _install(self, seat, head: dict) -> None:
        """Receive a newly seated request's KV from its prefill rank into the seat's cache slot."""
        me, eng = self.me, self.eng
        cache = self.inst.cache
        pre = eng.instances[head["prefill"]]
        src = source_rank(pre, head["src_dp"], self.rg.tp_rank)
        shape = (len(cache.data), head["length"], cache.data[0].shape[-1])
        kv, sec = eng.links.recv(shape, cache.data[0].dtype, me.device, src, seat.rid)
        for li, d in enumerate(cache.data):
            d[seat.slot, :head["length"]] = kv[li]
        self.last[seat.slot] = head["token"]
        self.first[seat.rid] = head["token"]
        info = eng.info.setdefault(seat.rid, {})
        if self.rg.tp_rank == 0:
            eng.checksums.append((seat.rid, "kv_checksum_recv", kv.sum()))
            info.update(kv_bytes=kv.numel() * kv.element_size(), kv_transfer_s=sec)
        eng.kv_record(seat.rid, head, src, kv, sec)

    def read_outputs(self) -> None:
        """The run is over: every request's emitted tokens, read from the device once."""
        for rids, toks in self.outputs:
            toks = [[t] for t in toks.tolist()] if isinstance(toks, torch.Tensor) else toks
            for rid, t in zip(rids, toks, strict=True):
                self.eng.info.setdefault(rid, {}).setdefault("output_tokens", []).extend(t)

    def after(self, tick: Tick) -> None:
        if not self.leader:
            return
        now = self.done_at
        for per in tick.work:
            for s in per:
                tl = self.eng.times(s.rid)
                if math.isnan(tl.first_token):
                    tl.first_token, tl.decode_rank = now, self.rg.inst.first + self._dp(tick, s) * self.lay.tp
        for _, rid in self.booked:
            self.eng.times(rid).finish = now
            self.eng.control.finish(now)

    @staticmethod
    def _dp(tick: Tick, seat) -> int:
        return next(d for d, per in enumerate(tick.work) if seat in per)


class Engine:
    """This rank's share of a disaggregated serving run: its instance loop and what it records."""

    def __init__(self, me, reqs, concurrency: int):
        self.me, self.reqs = me, reqs
        self.isl, self.osl, self.cached = reqs.isl.tolist(), reqs.osl.tolist(), reqs.cached.tolist()
        self.need = [i - c for i, c in zip(self.isl, self.cached, strict=True)]  # prompt tokens to compute
        self.caps = validate_plan(me.plan, me.plan_spec, me.hw)
        insts = serving_instances(me.plan, max_ranks(me.kind))
        self.instances = {i.name: i for i in insts}
        self.decoders = [i for i in insts if i.role == "decode"]
        self.fronts = [i.name for i in insts if i.role == "prefill"]
        check_kv_layouts(me.cfg.plan, me.spec, me.plan.prefill[0], me.plan.decode[0])
        self.groups = make_groups(insts, me.rank)
        self.links = KVLinks(insts, me.rank)
        store = dist.PrefixStore("rackplan-serve", dist.distributed_c10d._get_default_store())
        self.control = Control(store, reqs.arrival_s, concurrency, me.cfg.paced)
        self.records: list[dict] = []
        self.expert_trace: list[dict] = []
        self.info: dict[int, dict] = {}
        self.timelines: dict[int, Timeline] = {}
        self.sends: list = []
        self.checksums: list = []  # (rid, key, device scalar): KV sums of what was sent / received
        self.t0 = 0.0
        (rg,) = self.groups.values() if self.groups else (None,)
        self.loop = None
        if rg is not None:
            self.loop = (PrefillLoop if rg.inst.role == "prefill" else DecodeLoop)(self, rg)
        self.index = {name: k for k, name in enumerate(self.instances)}

    def clock(self) -> float:
        return time.perf_counter() - self.t0

    def times(self, rid: int) -> Timeline:
        return self.timelines.setdefault(rid, Timeline())

    def prompt(self, rid: int) -> torch.Tensor:
        return prompt_tokens(self.me.cfg.seed, rid, self.isl[rid], self.me.spec.vocab_size)

    def core(self, inst) -> EngineCore:
        """The serving policy of instance `inst` (rackplan/policy), KV blocks per rank from the memory
        model (the simulator's capacity, sim/deployment.validate_plan)."""
        pool = inst.name.split(".")[0]
        spec = self.me.plan_spec
        return EngineCore.for_layout(inst.layout, self.caps[pool], spec.attention.kind, self.isl, self.osl, self.cached,
                                     window=window_tokens(spec, block_tokens(spec.attention.kind)))

    def iteration(self, rg, tick: Tick, overhead_s: float) -> None:
        """The leader's loop time of one step outside the step itself (op 'host', role 'serve')."""
        lay = rg.inst.layout
        key = "prefill_steps" if rg.inst.role == "prefill" else "decode_steps"
        self.records.append(dict(self.me.base, role="serve", instance_dp=lay.dp, ep=lay.ep_size, step=tick.index,
                                 op="host", layers=1, shape={key: 1, "instance": rg.inst.name, "time_shared": False},
                                 dtype=self.me.dtype_name, seconds=max(overhead_s, 0.0), source="measured",
                                 cuda_graphs=False))

    def kv_record(self, rid: int, head: dict, src: int, kv: torch.Tensor, sec: float) -> None:
        dec = self.loop.rg.inst
        self.records.append(dict(self.me.base, role="serve", instance_dp=dec.layout.dp, ep=dec.layout.ep_size,
                                 step=rid, op="kv.transfer", layers=1, dtype=self.me.dtype_name, seconds=sec,
                                 source="measured", cuda_graphs=False,
                                 shape={"bytes": kv.numel() * kv.element_size(), "tokens": head["length"],
                                        "src": src, "dst": self.me.rank, "prefill": head["prefill"],
                                        "decode": dec.name}))

    def trace(self, inst: Instance) -> None:
        """Logical expert counts of this step per MoE layer (sim.routing.read_expert_trace); the
        step number is unique over instances."""
        step = self.index[inst.rg.inst.name] * 1_000_000 + inst.steps - 1
        for i, counts in enumerate(inst.model.expert_counts):
            self.expert_trace.append({"step": step, "layer": i, "rank": self.me.rank, "role": inst.role,
                                      "expert_counts": counts.tolist(), "kind": "expert_counts"})
        inst.model.expert_counts.clear()

    def warmup(self, steps: int) -> None:
        """Untimed steps on dummy tokens in slot 0 of this rank's cache (later requests overwrite it)."""
        if self.loop is None:
            return
        inst, dev = self.loop.inst, self.me.device
        for _ in range(steps):
            n = max(1, min(4, inst.cache.max_ctx - 1))
            toks, slot = torch.zeros(n, dtype=torch.long, device=dev), torch.zeros(1, dtype=torch.long, device=dev)
            batch = Batch.prefill(toks, [n], slot) if inst.role == "prefill" else Batch.decode(toks[:1], [n], slot)
            inst.model.forward(batch, inst.cache, NullTimer())
            inst.model.expert_counts.clear()


def shared_epoch() -> float:
    """This rank's perf_counter reading at rank 0's start instant, so that every rank's `Engine.clock()`
    counts from one instant: a request's prefill_done (its prefill rank's clock) and first_token (its
    decode rank's) compare. Each rank taking its own perf_counter after the barrier offset them by how
    far apart the ranks left it (milliseconds on a loaded host). Rank 0 broadcasts its wall time at
    start; each rank maps it through its own wall - perf_counter offset (exact on one host, NTP's
    precision across hosts)."""
    wall, mono = time.time(), time.perf_counter()
    start = [wall]
    dist.broadcast_object_list(start, src=0)
    return mono - (wall - start[0])


def serve_disaggregated(me) -> list[dict]:
    """One rank's disaggregated serving run; rank 0 gets every rank's records plus the requests'."""
    wl = load_workload(me.cfg.workload)
    reqs = make_requests(wl, me.cfg.requests)
    eng = Engine(me, reqs, wl.arrival.concurrency or 0)
    eng.warmup(me.cfg.warmup)
    gc.collect()
    gc.freeze()  # the startup heap (model, caches, torch) is never garbage: collections skip it (vLLM's workers
    # freeze theirs after warm-up too: freeze_gc_heap); each step's records count the collections it ran
    eng.records.append(probe_record(me.base, me.dtype_name, 0))  # this process's CPU speed, before and after
    dist.barrier()
    eng.t0 = shared_epoch()
    if eng.loop is not None:
        eng.loop.run()
        if isinstance(eng.loop, DecodeLoop):
            eng.loop.read_outputs()
    eng.records.append(probe_record(me.base, me.dtype_name, 1))
    for work, _ in eng.sends:
        work.wait()
    for rid, key, val in eng.checksums:
        eng.info.setdefault(rid, {})[key] = float(val)
    dist.barrier()
    return _gather(me, eng)


def _gather(me, eng: Engine) -> list[dict]:
    part = (eng.records, eng.info, {rid: vars(t) for rid, t in eng.timelines.items()}, eng.expert_trace)
    parts = [None] * me.world if me.rank == 0 else None
    dist.gather_object(part, parts, dst=0)
    if me.rank != 0:
        return []
    info: dict[int, dict] = {}
    times: dict[int, dict] = {}
    for _, inf, tl, _ in parts:
        for rid, d in inf.items():
            info.setdefault(rid, {}).update(d)
        for rid, d in tl.items():
            merged = times.setdefault(rid, {})
            merged.update({k: v for k, v in d.items() if not (isinstance(v, float) and math.isnan(v))
                           and not (k.endswith("_rank") and v < 0) and k != "kv_transfer_s"})
    steps = [r for recs, _, _, _ in parts for r in recs]
    trace = [t for _, _, _, tr in parts for t in tr]
    return steps + request_records(me, eng, times, info) + trace


def request_records(me, eng: Engine, times: dict, info: dict) -> list[dict]:
    """One 'request' record per request (times from the run start, every rank's clock)."""
    n_layers = len(layer_ids(me.spec, "decode", me.cfg.max_dense, me.cfg.max_moe))
    return [request_record(me.base, rid, Timeline(**times.get(rid, {})), eng.isl[rid], eng.osl[rid], eng.cached[rid],
                           me.plan.decode[0], n_layers, me.dtype_name, False, info.get(rid, {}))
            for rid in range(len(eng.isl))]
