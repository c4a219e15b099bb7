"""Colocated serving mode on real ranks: a workload's requests through prefill -> KV hand-off ->
decode, the prefill and decode instances time-sharing the same ranks (plans with `colocated: true`;
disaggregated plans run disagg.py's separate instances instead).

One lockstep loop on every rank. Rank 0 runs the Scheduler (serving.py) on the wall clock:
requests arrive at their scheduled times from the run start (an idle engine sleeps until the
next one) and each tick's schedule (prefill chunks, KV transfers, decode seats) is broadcast to
all ranks. A tick then runs, in order:
  1. a prefill step on the prefill instance's ranks at its token budget (chunked prompts attend
     over their earlier chunks' KV), with real EP all-to-all dispatch/combine;
  2. the KV hand-off: every prefilled prompt's cache entries [layers, isl, D] plus its first
     sampled token go from its prefill rank to its decode rank in one all_to_all_single over the
     world group (bytes), where they are staged until the request takes a decode seat;
  3. a decode step on the decode instance's ranks: one token per seated request (continuous
     batching: seats free as requests finish and are refilled from the staged ones).
Time sharing: a plan's prefill rank i and decode rank i are the same process i (a 2-core CPU
cannot hold 4 busy ranks), so prefill and decode steps alternate instead of overlapping, and a
KV hand-off whose source and destination rank coincide is a copy inside the process (it still
goes through the all-to-all). Records say so: shape["time_shared"] on step records.
Records: per step per op ("prefill" / "decode" roles, as in the benchmark mode), and one
"request" record per request (role "serve") with ttft_s, tpot_s, e2e_s, isl, osl, arrival_s.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.distributed as dist

from rackplan.sim.workload import make_requests
from rackplan.specs import SpecError

from .attention import sub_seed
from .dbo import dbo_splits
from .model import Batch, layer_ids
from .records import request_record, step_records
from .serving import Scheduler, Tick, engines
from .shard import build_shard
from .step_shape import StepShape
from .timing import HostClock, NullTimer, StepTimer, wall
from .topology import make_groups, max_ranks, serving_instances

IDLE_POLL_S = 1.0  # longest sleep before rank 0 tells the others it is still waiting


def prompt_tokens(seed: int, rid: int, isl: int, vocab: int) -> torch.Tensor:
    """Request `rid`'s prompt token ids [isl] (any rank, and the tests' reference, can draw them)."""
    rng = np.random.default_rng(sub_seed(seed, "prompt", rid))
    return torch.from_numpy(rng.integers(0, vocab, isl))


class Instance:
    """One instance's shard on this rank: model, KV cache, EP group, timer."""

    def __init__(self, me, rg, slots: int, max_ctx: int, time_shared: bool = True):
        self.me, self.rg, self.role, self.layout = me, rg, rg.inst.role, rg.inst.layout
        self.time_shared = time_shared
        self.group = rg.instance
        self.model = build_shard(me.spec, me.cfg.seed, me.device, me.dtype, rg, self.role, me.cfg.max_dense,
                                 me.cfg.max_moe, me.placements(self.layout),
                                 dbo=self.layout.dbo, fp8=me.fp8)
        self.model.expert_counts = []  # [E] logical expert counts per MoE layer of the last step
        self.cache = self.model.kv_cache(slots, max_ctx)
        self.timer = StepTimer(me.kind, rg.ep)
        self.n_dense = sum(layer.dense for layer in self.model.layers)
        self.n_moe = len(self.model.layers) - self.n_dense
        self.steps = 0
        self.clock = HostClock()  # host parts of the step in flight (the serving loop resets it)
        self.last_shape = StepShape()

    def forward(self, batch: Batch, sample, device_step=None, rank_tokens: list[int] | None = None,
                has_prefill: bool = False) -> tuple[dict, object]:
        """Timed forward + sampling (the StepLoop's timing): seconds per op, sampled ids.
        `device_step(timer)` replaces the plain forward (a speculative draft + verify). `rank_tokens`: the
        query tokens of every DP rank of the step (the tick's work, alike on every rank), from which a DBO
        layout decides whether the step splits (executor/dbo.py)."""
        self.model.split = self.model.dbo and dbo_splits(self.layout, rank_tokens or [], has_prefill)
        for layer in self.model.layers:
            if not layer.dense:
                layer.experts.rows = 0
        self.timer.reset()
        if self.group is not None:  # DP coordination: the ranks line up (the slowest one's host work)
            with self.clock.part("host.dp_sync"):
                dist.barrier(group=self.group)
        with wall(self.me.kind) as w:
            logits = device_step(self.timer) if device_step else self.model.forward(batch, self.cache, self.timer)
            with self.timer.section("host", host=True), self.clock.part("host.sample"):
                out = sample(logits)
        sec = self.timer.collect()
        sec["step"] = w["seconds"]
        return sec, out

    def expert_tokens(self) -> int:
        rows = [int(layer.experts.rows) for layer in self.model.layers if not layer.dense]
        return round(sum(rows) / len(rows)) if rows else 0

    def record(self, sec: dict, shape: StepShape, prep_s: float, exposed_s: float | None = None) -> list[dict]:
        """Step records; `prep_s`: host work before the forward; `exposed_s`: the part of it the
        step waited for (all of it unless async scheduling ran it during the previous step)."""
        sec["host.exposed"] = (prep_s if exposed_s is None else exposed_s) + sec.get("host", 0.0)
        sec["host"] = sec.get("host", 0.0) + prep_s
        sec["step"] += prep_s if exposed_s is None else exposed_s
        rows = [int(layer.experts.rows) for layer in self.model.layers if not layer.dense]
        if self.model.dbo:  # the record says whether this step ran as two micro-batches
            shape = shape.with_extra(dbo=self.model.split)
        shape = shape.with_extra(expert_tokens=self.expert_tokens(), expert_tokens_layers=rows,
                                 budget=self.layout.max_tokens_per_step, max_batch=self.layout.max_batch_per_rank,
                                 time_shared=self.time_shared, serving=True, instance=self.rg.inst.name,
                                 dp_rank=self.rg.dp_rank, tp_rank=self.rg.tp_rank)
        if self.me.eplb_info(self.layout):
            shape = shape.with_extra(eplb=self.me.eplb_info(self.layout))
        self.last_shape = shape  # the loop's own host parts of this step are recorded with it
        self.steps += 1
        return step_records(self.me.base, self.role, self.layout, self.steps - 1, sec, shape,
                            self.me.dtype_name, self.n_dense, self.n_moe)


class Engine:
    """This rank's part of every tick; it keeps the staged KV, decode seats and outputs."""

    def __init__(self, me, reqs):
        self.me, self.reqs, self.rank = me, reqs, me.rank
        groups = make_groups(serving_instances(me.plan, max_ranks(me.kind)), me.rank)
        isl, osl = reqs.isl.tolist(), reqs.osl.tolist()
        rg_pre = groups.get("prefill[0].0")
        rg_dec = groups.get("decode[0].0") or groups.get("aggregated[0].0")  # an aggregated plan: one instance
        self.pre = Instance(me, rg_pre, rg_pre.inst.layout.max_batch_per_rank + 1, max(isl)) if rg_pre else None
        self.dec = Instance(me, rg_dec, rg_dec.inst.layout.max_batch_per_rank,
                            max(i + o for i, o in zip(isl, osl, strict=True)) + 1) if rg_dec else None
        if self.dec is not None:
            self.dec.role = "decode"  # an aggregated instance's steps: recorded as decode (its chunks as prefill)
        inst = self.dec or self.pre  # None on a rank beyond both instances (an idle rank)
        data = inst.cache.data if inst else []
        self.kv_layers = len(data)
        self.kv_dim, self.kv_elem = (data[0].shape[-1], data[0].element_size()) if data else (0, 0)
        self.first: dict[int, int] = {}  # rid -> token sampled by its last prefill chunk
        self.staged: dict[int, tuple[torch.Tensor, int]] = {}  # rid -> (KV [layers, L, D], token)
        self.last: dict[int, int] = {}  # decode slot -> its sequence's last token
        self.info: dict[int, dict] = {}  # rid -> what this rank saw (checksums, output tokens)
        self.records: list[dict] = []
        self.trace: list[dict] = []  # expert counts per step and MoE layer
        self.num_steps = 0  # prefill and decode steps, the same count on every rank

    def prompt(self, rid: int) -> torch.Tensor:
        return prompt_tokens(self.me.cfg.seed, rid, int(self.reqs.isl[rid]), self.me.spec.vocab_size)

    def run(self, tick: Tick) -> tuple[float, float]:
        """Run one tick; returns (perf_counter when every rank had finished the prefill step, the KV
        hand-off's wall seconds), both NaN/0 for a tick without a hand-off."""
        prefilled, xfer_s = math.nan, 0.0
        if tick.has_prefill:
            self.prefill_step(tick)
        if tick.transfers:
            prefilled, xfer_s = self.transfer(tick)
        if tick.has_decode:
            self.decode_step(tick)
        return prefilled, xfer_s

    def prefill_step(self, tick: Tick) -> None:
        if self.pre is not None:
            chunks = tick.prefill[self.rank]
            self.pre.cache.keep(tick.prefill_kept[self.rank], chunks)  # preempted: KV set aside; readmitted: back
            t0 = time.perf_counter()
            parts = [self.prompt(c.rid)[c.start:c.start + c.take] for c in chunks]
            toks = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
            batch = Batch.prefill(toks.to(self.me.device), [c.take for c in chunks],
                                  torch.tensor([c.slot for c in chunks], dtype=torch.long, device=self.me.device),
                                  [c.start for c in chunks])
            shape = StepShape.prefill([c.take for c in chunks], [c.start for c in chunks]).with_extra(
                tokens_global=sum(c.take for per in tick.prefill for c in per))
            prep_s = time.perf_counter() - t0
            sec, ids = self.pre.forward(batch, lambda logits: logits.argmax(-1).tolist(), has_prefill=True,
                                        rank_tokens=[sum(c.take for c in per) for per in tick.prefill])
            for c, tok in zip(chunks, ids, strict=True):
                if c.last:
                    self.first[c.rid] = tok
            self.records += self.pre.record(sec, shape, prep_s)
            self._trace(self.pre)
        self.num_steps += 1

    def transfer(self, tick: Tick) -> tuple[float, float]:
        """KV + first token of each prefilled prompt: prefill rank -> decode rank (all_to_all)."""
        world = self.me.world
        send, send_splits = [], [0] * world
        for dst in range(world):
            for tr in (t for t in tick.transfers if t.src == self.rank and t.dst == dst):
                kv = torch.stack([d[tr.src_slot, :tr.length] for d in self.pre.cache.data])  # [layers, L, D]
                self.info.setdefault(tr.rid, {})["kv_checksum_sent"] = float(kv.double().sum())
                tok = torch.tensor([self.first.pop(tr.rid)], dtype=torch.long, device=kv.device)
                send += [kv.reshape(-1).view(torch.uint8), tok.view(torch.uint8)]
                send_splits[dst] += send[-2].numel() + 8
        recv = [t for src in range(world) for t in tick.transfers if t.src == src and t.dst == self.rank]
        recv_splits = [sum(self._kv_bytes(t) for t in recv if t.src == s) for s in range(world)]
        inp = torch.cat(send) if send else torch.zeros(0, dtype=torch.uint8, device=self.me.device)
        out = torch.empty(sum(recv_splits), dtype=torch.uint8, device=self.me.device)
        dist.barrier()  # every prefill rank is done: the hand-off starts now
        prefilled = time.perf_counter()
        with wall(self.me.kind) as w:
            dist.all_to_all_single(out, inp, recv_splits, send_splits)
        self._stage(recv, out)
        return prefilled, w["seconds"]

    def _kv_bytes(self, tr) -> int:
        return self.kv_layers * tr.length * self.kv_dim * self.kv_elem + 8

    def _stage(self, recv, out: torch.Tensor) -> None:
        at = 0
        for tr in recv:
            n = self._kv_bytes(tr) - 8
            # clone: a byte offset need not be aligned for the wider dtype's view
            kv = out[at:at + n].clone().view(self.dec.cache.data[0].dtype).view(self.kv_layers, tr.length,
                                                                                 self.kv_dim)
            tok = int(out[at + n:at + n + 8].clone().view(torch.long)[0])
            at += n + 8
            self.staged[tr.rid] = (kv, tok)
            self.info.setdefault(tr.rid, {}).update(kv_checksum_recv=float(kv.double().sum()), kv_bytes=n)

    def decode_step(self, tick: Tick) -> None:
        if self.dec is not None:
            self.dec.cache.keep(tick.decode_kept[self.rank], tick.decode_chunks[self.rank])
            if any(tick.decode_chunks):  # every rank of the instance steps (EP collectives), chunks or not
                self._decode_chunks(tick.decode_chunks[self.rank],
                                    [sum(c.take for c in per) for per in tick.decode_chunks])
            t0 = time.perf_counter()
            seats = tick.decode[self.rank]
            for s in seats:
                if s.new:
                    self._seat(s)
            dev = self.me.device
            batch = Batch.decode(torch.tensor([self.last[s.slot] for s in seats], dtype=torch.long, device=dev),
                                 [s.ctx for s in seats], torch.tensor([s.slot for s in seats], device=dev))
            shape = StepShape.decode([s.ctx for s in seats]).with_extra(
                tokens_global=sum(len(per) for per in tick.decode))
            prep_s = time.perf_counter() - t0
            sec, ids = self.dec.forward(batch, lambda logits: logits.argmax(-1).tolist(),
                                        rank_tokens=[len(per) for per in tick.decode])
            for s, tok in zip(seats, ids, strict=True):
                self.last[s.slot] = tok
                self.info[s.rid]["output_tokens"].append(tok)
            self.records += self.dec.record(sec, shape, prep_s)
            self._trace(self.dec)
        self.num_steps += 1

    def _decode_chunks(self, chunks, rank_tokens: list[int]) -> None:
        """Prefill chunks on the decode (aggregated) instance's rank, before its decode step: an
        aggregated plan's prompts (the last chunk samples the first token) and the recompute of a
        preempted sequence's context (prompt + tokens emitted so far; its last token goes on)."""
        t0 = time.perf_counter()
        parts = [self.sequence(c.rid)[c.start:c.start + c.take] for c in chunks]
        toks = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        dev = self.me.device
        batch = Batch.prefill(toks.to(dev), [c.take for c in chunks],
                              torch.tensor([c.slot for c in chunks], dtype=torch.long, device=dev),
                              [c.start for c in chunks])
        shape = StepShape.prefill([c.take for c in chunks], [c.start for c in chunks]).with_extra(mixed=True)
        prep_s = time.perf_counter() - t0
        sec, ids = self.dec.forward(batch, lambda logits: logits.argmax(-1).tolist(), rank_tokens=rank_tokens,
                                    has_prefill=True)
        for c, tok in zip(chunks, ids, strict=True):
            out = self.info.setdefault(c.rid, {}).setdefault("output_tokens", [])
            if c.last:
                if not out:  # a prompt's last chunk: its first token
                    out.append(tok)
                self.last[c.slot] = out[-1]
        self.records += [dict(r, role="prefill") for r in self.dec.record(sec, shape, prep_s)]
        self._trace(self.dec)

    def sequence(self, rid: int) -> torch.Tensor:
        """Request `rid`'s tokens so far: its prompt, then what it emitted [isl + emitted]."""
        out = self.info.get(rid, {}).get("output_tokens", [])
        prompt = self.prompt(rid)
        return torch.cat([prompt, torch.tensor(out, dtype=torch.long)]) if out else prompt

    def _seat(self, s) -> None:
        """Install a staged request's KV in its decode slot (the hand-off's receiving side)."""
        kv, tok = self.staged.pop(s.rid)
        for li, d in enumerate(self.dec.cache.data):
            d[s.slot, :kv.shape[1]] = kv[li]
        self.last[s.slot] = tok
        self.info[s.rid]["output_tokens"] = []

    def _trace(self, inst: Instance) -> None:
        """Logical expert counts of this step per MoE layer (sim.routing.read_expert_trace)."""
        for i, counts in enumerate(inst.model.expert_counts):
            self.trace.append({"step": self.num_steps, "layer": i, "rank": self.rank, "role": inst.role,
                               "expert_counts": counts.tolist()})
        inst.model.expert_counts.clear()

    def warmup(self, steps: int) -> None:
        """Untimed steps on dummy tokens in slot 0 of each cache (later hand-offs overwrite it)."""
        dev = self.me.device
        for _ in range(steps):
            for inst in (self.pre, self.dec):
                if inst is None:
                    continue
                n = max(1, min(4, inst.cache.max_ctx - 1))
                toks, slot = torch.zeros(n, dtype=torch.long, device=dev), torch.zeros(1, dtype=torch.long, device=dev)
                batch = Batch.prefill(toks, [n], slot) if inst.role == "prefill" else Batch.decode(toks[:1], [n], slot)
                inst.model.forward(batch, inst.cache, NullTimer())
                inst.model.expert_counts.clear()


def check_plan(plan, where: str) -> None:
    """What the time-shared engine (a colocated or aggregated plan) cannot run, refused before any
    rank starts (SpecError naming the field): more than one instance per pool, TP, PP, speculation."""
    pools = [("prefill", plan.prefill), ("decode", plan.decode)] if plan.disaggregated \
        else [("aggregated", plan.aggregated)]
    for pool, lays in pools:
        if len(lays) > 1 or lays[0].replicas > 1:
            raise SpecError(where, f"{pool}[0].replicas", "one instance per pool in a colocated or aggregated "
                            "serving run (the time-shared engine runs one of each)", sum(lay.replicas for lay in lays))
        lay = lays[0]
        for name, val in (("tp", lay.tp), ("pp", lay.pp)):
            if val != 1:
                raise SpecError(where, f"{pool}[0].{name}", "1 in a colocated or aggregated plan (the time-shared "
                                "engine runs DEP ranks of one pipeline stage; TP runs in disaggregated serving)", val)
        if lay.speculation is not None:
            raise SpecError(where, f"{pool}[0].speculation", "none in a colocated or aggregated plan (speculation "
                            "runs in benchmark mode and in disaggregated serving)", lay.speculation.num_tokens)


def check_servable(me) -> None:
    """The colocated engine runs a disaggregated plan's prefill and decode instance on the same ranks,
    or an aggregated plan's instance (check_plan), on at most the world's ranks."""
    plan = me.plan
    check_plan(plan, me.cfg.plan)
    for pool in ("prefill", "decode", "aggregated"):
        for lay in getattr(plan, pool):
            if lay.ep_size > me.world:
                raise SpecError(me.cfg.plan, f"{pool}[0].dp", f"at most {me.world} ranks (serving runs no replays)",
                                lay.ep_size)
    if plan.disaggregated and layer_ids(me.spec, "prefill", me.cfg.max_dense, me.cfg.max_moe) != \
            layer_ids(me.spec, "decode", me.cfg.max_dense, me.cfg.max_moe):
        raise SpecError(me.plan.model, "layers", "the same layers in prefill and decode for serving mode")


def _next(sched: Scheduler, t0: float):
    """Rank 0: the next tick to broadcast, ("idle", None) after a bounded sleep, or ("stop", None)."""
    now = time.perf_counter() - t0
    sched.arrive(now)
    if sched.finished:
        return "stop", None
    if sched.busy:
        return "tick", sched.plan(now)
    wait = sched.next_arrival() - now
    time.sleep(min(IDLE_POLL_S, wait) if math.isfinite(wait) and wait > 0 else 0.0)
    return "idle", None


def serve_rank(me) -> list[dict]:
    """One rank's serving run; rank 0 gets every rank's step records plus the request records."""
    check_servable(me)
    from rackplan.specs import load_workload
    wl = load_workload(me.cfg.workload)
    reqs = make_requests(wl, me.cfg.requests)
    engine = Engine(me, reqs)
    engine.warmup(me.cfg.warmup)
    sched = scheduler(me.plan, me.plan_spec, me.hw, reqs, wl.arrival.concurrency or 0) if me.rank == 0 else None
    dist.barrier()
    t0 = time.perf_counter()
    while True:
        t_tick, n_rec = time.perf_counter(), len(engine.records)
        msg = [_next(sched, t0) if me.rank == 0 else None]
        dist.broadcast_object_list(msg, src=0)
        kind, tick = msg[0]
        if kind == "stop":
            break
        if kind == "idle":
            continue
        if tick.index == 0:
            me.fault("step")
        prefilled, xfer_s = engine.run(tick)
        dist.barrier()  # the tick ends when every rank is done: its tokens exist now
        if me.rank == 0:
            sched.done(tick, time.perf_counter() - t0, prefilled - t0, xfer_s)
            engine.records.append(_iteration_record(me, tick, engine.records[n_rec:], t_tick))
    return _gather(me, engine, sched, reqs)


def decode_layout(plan):
    """The layout that decodes: the first decode instance's, or an aggregated plan's instance's."""
    return plan.decode[0] if plan.disaggregated else plan.aggregated[0]


def scheduler(plan, model, hw, reqs, concurrency: int) -> Scheduler:
    """Rank 0's policy for the run: the plan's first instances (serving.engines), the run's requests."""
    isl, osl = reqs.isl.tolist(), reqs.osl.tolist()
    pre, dec = engines(plan, model, hw, isl, osl, reqs.cached.tolist())
    return Scheduler(isl, osl, reqs.arrival_s.tolist(), pre, dec, concurrency)


def _iteration_record(me, tick, step_recs: list[dict], t_tick: float) -> dict:
    """Rank 0's engine-loop time of one tick outside its timed steps (scheduling, the schedule
    broadcast, KV hand-off, the closing barrier): op 'host', role 'serve'."""
    steps = [r for r in step_recs if r["op"] == "step"]
    wall = time.perf_counter() - t_tick
    shape = {"prefill_steps": sum(r["role"] == "prefill" for r in steps),
             "decode_steps": sum(r["role"] == "decode" for r in steps), "tick": tick.index, "time_shared": True}
    lay = decode_layout(me.plan)
    return dict(me.base, role="serve", instance_dp=lay.dp, ep=lay.ep_size, step=tick.index, op="host", layers=1,
                shape=shape, dtype=me.dtype_name, seconds=max(wall - sum(r["seconds"] for r in steps), 0.0),
                source="measured", cuda_graphs=False)


def _gather(me, engine: Engine, sched, reqs) -> list[dict]:
    parts = [None] * me.world if me.rank == 0 else None
    dist.gather_object((engine.records, engine.info, engine.trace), parts, dst=0)
    if me.rank != 0:
        return []
    info: dict[int, dict] = {}
    for _, part, _ in parts:
        for rid, d in part.items():
            info.setdefault(rid, {}).update(d)
    steps = [r for recs, _, _ in parts for r in recs]
    trace = [dict(t, kind="expert_counts") for _, _, tr in parts for t in tr]
    return steps + request_records(me, sched, reqs, info) + trace


def request_records(me, sched: Scheduler, reqs, info: dict) -> list[dict]:
    """One 'request' record per request, times from the scheduler's wall clock (run start = 0)."""
    n_layers = len(layer_ids(me.spec, "decode", me.cfg.max_dense, me.cfg.max_moe))
    return [request_record(me.base, rid, t, int(reqs.isl[rid]), int(reqs.osl[rid]), int(reqs.cached[rid]),
                           decode_layout(me.plan), n_layers, me.dtype_name, True, info.get(rid, {}))
            for rid, t in enumerate(sched.times)]
