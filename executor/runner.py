"""Per-rank main loops: prefill steps at the plan's token budget, decode steps at its batch per rank.

One rank's job (`run_rank`): for each instance of the plan (every pool entry; topology.py), build
the rank's shard (shard.py: EP slots with the plan's EPLB placement, TP slices), run
`warmup + steps` steps and turn each timed step into records. An instance that fits the world
runs for real over its process groups (ranks 0..n-1); a bigger DEP one is replayed (replay.py).
Decode steps of a layout with speculation draft and verify (speculate.py); with async scheduling
the next step's host work runs on a worker thread during this step's device work, and what the
device step did not hide is recorded as `host.exposed`. Rank 0 gathers every rank's records at
the end. Serving mode (`RunConfig.serve`) runs serve.py's or disagg.py's loop instead.
"""
from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from rackplan.specs import SpecError, load_hardware, load_model, load_plan, load_workload, plan_hash

from .attention import sub_seed
from .dbo import dbo_splits
from .model import Batch, Model, layer_ids
from .parallel import world_info
from .placement import plan_placements
from .probe import InPlace
from .records import base_record, step_records
from .replay import MODELLED_OPS, Replay
from .shard import build_shard
from .speculate import Drafter, Speculation, accept, acceptance_rate, draw_accepted, verify_batch
from .step_shape import StepShape
from .timing import StepTimer, wall
from .topology import benchmark_instances, make_groups, skipped
from .workload import decode_contexts, prefill_lengths


@dataclass(frozen=True)
class RunConfig:
    """Everything a rank needs (picklable: it crosses the fork)."""

    plan: str
    device: str = "cpu"  # cpu | cuda
    steps: int = 5
    warmup: int = 1
    workload: Optional[str] = None  # lengths from this workload instead of the plan's
    serve: bool = False  # serving mode: the workload's requests through prefill -> KV -> decode
    requests: Optional[int] = None  # serving: at most this many requests (default: the workload's)
    seed: int = 0
    timeout_s: float = 120.0
    max_dense: Optional[int] = None  # layer caps (replays of full-size models)
    max_moe: Optional[int] = None
    cuda_graphs: bool = True  # also time decode under a CUDA graph where the plan enables them
    skip_prefill: bool = False  # decode instances only
    skip_decode: bool = False  # prefill instances only
    fault: Optional[str] = None  # test hook: "raise:RANK" or "kill:RANK"
    model: Optional[str] = None  # run the plan's layouts on this model's shapes (e.g. tiny-moe on CPU)
    expert_counts: Optional[str] = None  # EPLB from this recorded trace instead of the workload's skew
    acceptance_rate: Optional[float] = None  # speculation: per-draft acceptance (default: the plan's)
    cores: Optional[tuple] = None  # CPU core of each rank (serving mode pins by role); None: rank mod cores
    fp8: bool = True  # GPU: the spec's 8-bit-or-narrower weights as FP8 where the device supports it
    step_gap_s: float = 0.0  # idle seconds before each benchmark step (an instance waiting for arrivals)
    paced: bool = False  # serving: each arrival instant's requests arrive once the prefill started every earlier one


class Rank:
    """This process's identity, device and the plan it runs."""

    def __init__(self, cfg: RunConfig, rank: int, world: int):
        self.cfg, self.rank, self.world = cfg, rank, world
        self.kind = cfg.device
        self.device = f"cuda:{torch.cuda.current_device()}" if cfg.device == "cuda" else "cpu"
        self.plan = load_plan(cfg.plan)
        self.spec = load_model(cfg.model or self.plan.model)
        self.plan_spec = load_model(self.plan.model) if cfg.model else self.spec
        self.hw = load_hardware(self.plan.hardware)
        wl = cfg.workload or self.plan.workload
        self.workload = load_workload(wl) if wl else None
        name = torch.cuda.get_device_name() if cfg.device == "cuda" else f"cpu ({os.cpu_count()} cores)"
        self.base = base_record(self.plan, plan_hash(self.plan), name, world_info(), rank, world)
        if cfg.model:
            self.base["model"], self.base["plan_model"] = self.spec.name, self.plan.model
        from .attention import compute_dtype
        from .fp8 import NARROW, supported
        self.dtype = compute_dtype(self.spec, cfg.device)
        self.dtype_name = str(self.dtype).replace("torch.", "")
        self.fp8 = cfg.fp8 and supported(self.device)
        dt = self.spec.dtypes
        self.base["weights"] = {fam: "fp8" if self.fp8 and d in NARROW else self.dtype_name for fam, d in
                                (("attention", dt.attention_weights), ("dense", dt.dense_weights),
                                 ("experts", dt.expert_weights))}

    def fault(self, where: str) -> None:
        """Test hook: make this rank raise or die by SIGKILL at `where`."""
        if not self.cfg.fault:
            return
        kind, _, rank = self.cfg.fault.partition(":")
        if int(rank or 0) != self.rank or where != "step":
            return
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"injected fault on rank {self.rank}")

    def placements(self, layout) -> Optional[dict]:
        """The layout's EPLB placement per MoE layer (placement.py), or None."""
        return plan_placements(self.spec, layout, self.hw, self._routing_load(), self.cfg.expert_counts)

    def _routing_load(self):
        """The workload's routing load as the simulator prices it (sim/expert_load.py; 0: uniform)."""
        from rackplan.sim.expert_load import routing_load
        return routing_load(self.workload, self.spec) if self.workload else 0.0

    def eplb_info(self, layout) -> Optional[dict]:
        """What the records say about an EPLB placement in use (None: contiguous experts)."""
        if layout.eplb.policy == "none" or layout.ep_size == 1:
            return None
        from rackplan.sim.expert_load import describe
        load = self._routing_load()
        return {"policy": layout.eplb.policy, "redundant_experts": layout.eplb.redundant_experts,
                "slots_per_rank": (self.spec.moe.num_experts + layout.eplb.redundant_experts) // layout.ep_size,
                "loads_from": self.cfg.expert_counts or (f"routing skew {load:g}" if isinstance(load, float)
                                                         else describe(load))}

    def drafter(self, layout, slots: int, max_ctx: int) -> Optional[Drafter]:
        """The drafter of a layout with speculation (the model's DraftSpec, else the plan model's)."""
        if layout.speculation is None:
            return None
        draft = self.spec.draft or self.plan_spec.draft
        if draft is None:
            raise SpecError(self.spec.name, "draft", "a draft spec (MTP or draft model) for a plan with speculation")
        return Drafter(self.spec, draft.kind, layout.speculation.num_tokens, draft.forward_passes,
                       self.cfg.seed, self.device, self.dtype, slots, max_ctx)

    def acceptance(self, layout) -> float:
        sp = layout.speculation
        return self.cfg.acceptance_rate if self.cfg.acceptance_rate is not None else \
            acceptance_rate(sp.num_tokens, sp.acceptance_length)


def run_rank(cfg: RunConfig, rank: int, world: int) -> list[dict]:
    """One rank's whole run; returns all ranks' records on rank 0 (empty elsewhere)."""
    me = Rank(cfg, rank, world)
    if cfg.serve:
        from .disagg import serve_disaggregated
        from .serve import serve_rank
        return serve_rank(me) if me.plan.colocated or not me.plan.disaggregated else serve_disaggregated(me)
    records = []
    for inst in benchmark_instances(me.plan):
        if not skipped(inst, cfg.skip_prefill, cfg.skip_decode):
            records += run_instance(me, inst)
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(records, gathered, dst=0)
    return [r for part in gathered for r in part] if rank == 0 else []


def run_instance(me: Rank, inst) -> list[dict]:
    """Benchmark one instance: real ranks when it fits the world, a replay of one rank otherwise."""
    lay = inst.layout
    if lay.pp != 1:
        raise SpecError(me.cfg.plan, f"{inst.name}.pp", "1 (the executor runs one pipeline stage)", lay.pp)
    measured = lay.gpus <= me.world
    if not measured and lay.tp > 1:
        raise SpecError(me.cfg.plan, f"{inst.name}.tp", f"an instance of at most {me.world} ranks (a TP "
                        "instance is not replayed; pass --ranks)", lay.gpus)
    groups = make_groups([inst], me.rank) if measured else {}
    if measured and me.rank >= lay.gpus:
        return []
    phase = "prefill" if inst.role == "prefill" else "decode"
    if measured:
        rg = groups[inst.name]
        model = build_shard(me.spec, me.cfg.seed, me.device, me.dtype, rg, phase, me.cfg.max_dense,
                            me.cfg.max_moe, me.placements(lay), dbo=lay.dbo, fp8=me.fp8)
        replay = None
    else:
        from .parallel import make_ep_group
        rg = None
        ep = make_ep_group(None, 0, 1, me.spec.moe.num_experts)
        model = Model(me.spec, me.cfg.seed, me.device, me.dtype, ep,
                      layer_ids(me.spec, phase, me.cfg.max_dense, me.cfg.max_moe), build_experts=False)
        group = dist.group.WORLD if me.world > 1 else None  # the plan's all-to-all bytes among real ranks
        replay = Replay(model, me.plan, lay, me.rank, me.cfg.seed, group, me.world, fp8=me.fp8)
        model.moe = replay.moe
    return StepLoop(me, inst, model, replay, rg).run()


class StepLoop:
    """Runs and records the steps of one instance on one rank."""

    def __init__(self, me: Rank, inst, model: Model, replay: Optional[Replay], rg):
        self.me, self.inst, self.layout, self.model, self.replay, self.rg = me, inst, inst.layout, model, replay, rg
        self.role = inst.role
        self.dp_rank = rg.dp_rank if rg is not None else me.rank
        self.rng = np.random.default_rng(sub_seed(me.cfg.seed, self.role, self.dp_rank))
        self.group = rg.instance if rg is not None else (replay.group if replay is not None else None)
        self.timer = StepTimer(me.kind, rg.ep if rg is not None else self.group)
        n_dense = sum(layer.dense for layer in model.layers)
        self.n_dense, self.n_moe = n_dense, len(model.layers) - n_dense
        self.decode_state = None
        self.prefill_kv = None
        self.drafter = None
        self.pool = ThreadPoolExecutor(1) if self.layout.async_scheduling else None
        # GPU async scheduling: the next batch's host-to-device copies go on a side stream, so the
        # worker thread never waits behind this step's kernels
        self.side = torch.cuda.Stream() if self.pool is not None and me.kind == "cuda" else None
        self._next_prepare = None

    def run(self) -> list[dict]:
        """Warm-up and timed steps; the rig's speed probed in place between timed steps (executor/probe.py
        InPlace: before timed steps 0, 5, ... and after the last; outside every step's time)."""
        out = []
        pending = self.pool.submit(self._prepare_ahead, 0) if self.pool else None
        probes = InPlace(self.me.base, self.me.dtype_name)
        t_run = time.perf_counter()
        for step in range(self.me.cfg.warmup + self.me.cfg.steps):
            if step == self.me.cfg.warmup:
                self.me.fault("step")
            timed = step - self.me.cfg.warmup
            if timed >= 0 and probes.due(step=timed):
                out.append(probes.probe(timed, time.perf_counter() - t_run)[0])
            if self.me.cfg.step_gap_s:  # untimed: caches (and, on a VM, the vCPU) go cold as in light serving
                time.sleep(self.me.cfg.step_gap_s)
            sec, shape = self.step(step, pending)
            pending = self._next_prepare
            if step >= self.me.cfg.warmup:
                out += self.records(step - self.me.cfg.warmup, sec, shape)
        out.append(probes.probe(self.me.cfg.steps, time.perf_counter() - t_run)[0])
        if self.pool:
            self.pool.shutdown()
        if self.role == "decode" and self.replay is not None and self.me.kind == "cuda" and \
                self.layout.cuda_graphs and self.me.cfg.cuda_graphs and self.layout.speculation is None:
            from .graphs import graph_decode_records
            out += graph_decode_records(self)
        return out

    def records(self, step: int, sec: dict, shape: StepShape) -> list[dict]:
        modelled = ()
        shape = shape.with_extra(budget=self.layout.max_tokens_per_step, max_batch=self.layout.max_batch_per_rank,
                                 instance=self.inst.name, dp_rank=self.dp_rank)
        if self.rg is not None:
            shape = shape.with_extra(tp_rank=self.rg.tp_rank, ep_rank=self.rg.ep_rank)
            if self.me.eplb_info(self.layout):
                shape = shape.with_extra(eplb=self.me.eplb_info(self.layout))
        if self.replay is not None:
            if self.replay.group is None:
                sec.update(self.replay.modelled_a2a(shape.tokens, self.n_moe, self.role))
                modelled = MODELLED_OPS
            shape = shape.with_extra(ep_plan=self.layout.ep_size, world_measured=self.me.world,
                                     a2a_world=self.me.world, replayed_rank=self.me.rank,
                                     layers_run=len(self.model.layers))
        return step_records(self.me.base, self.role, self.layout, step, sec, shape, self.me.dtype_name,
                            self.n_dense, self.n_moe, modelled)

    def step(self, step: int, pending) -> tuple[dict, StepShape]:
        """One timed step: host preparation (this step's, or the worker's result under async
        scheduling), the device forward (draft + verify under speculation), sampling."""
        t0 = time.perf_counter()
        prep = pending.result() if pending is not None else self.prepare(step)
        exposed_s = time.perf_counter() - t0
        batch, cache, shape = self._fill_tokens(prep)
        self._reset_expert_rows()
        if self.replay is not None:
            self.replay.prepare(shape.tokens, step)
        shape = shape.with_extra(tokens_global=self._tokens_global(shape.tokens))
        if self.model.dbo:  # the fewest tokens on any rank decides the split for all (executor/dbo.py)
            self.model.split = dbo_splits(self.layout, [self._tokens_min(shape.tokens)], self.role == "prefill")
            shape = shape.with_extra(dbo=self.model.split)
        self.timer.reset()
        if self.group is not None:
            dist.barrier(group=self.group)
        self._next_prepare = None
        with wall(self.me.kind) as w:
            if self.pool is not None:  # the next step's host work runs during this step's device work
                self._next_prepare = self.pool.submit(self._prepare_ahead, step + 1)
            out = self.forward(batch, cache, prep)
            with self.timer.section("host", host=True):
                sampled = self.sample(out)
        sec = self.timer.collect()
        sec["host.exposed"] = exposed_s + sec.get("host", 0.0)
        sec["host"] = sec.get("host", 0.0) + prep["host_s"]
        sec["step"] = w["seconds"] + exposed_s
        shape = shape.with_extra(**sampled, **self._expert_shape(), async_scheduling=self.pool is not None)
        return sec, shape

    def forward(self, batch: Batch, cache, prep: dict):
        """Device work of one step: the forward, or draft + verify of a speculative decode step."""
        if prep.get("accepted") is None:
            return self.model.forward(batch, cache, self.timer)
        drafts = self.drafter.propose(batch.tokens, prep["ctx"], None, self.timer)
        logits = self.model.forward(verify_batch(batch.tokens, drafts, prep["ctx"], None), cache, self.timer)
        return accept(logits, drafts, prep["accepted"])

    def prepare(self, step: int) -> dict:
        """Host work before a forward: the batch, its metadata, the cache (decode); token ids of a
        decode step come from the previous step's sampling (filled in by `_fill_tokens`)."""
        t0 = time.perf_counter()
        if self.role == "prefill":
            lens = prefill_lengths(self.me.workload, self.layout.max_tokens_per_step,
                                   self.layout.max_batch_per_rank, self.rng)
            tokens = torch.from_numpy(self.rng.integers(0, self.me.spec.vocab_size, sum(lens))).to(self.me.device)
            shape = StepShape.prefill(lens)
            slots = torch.arange(len(lens), device=self.me.device)  # the prompts' KV is stored, as in serving
            return {"batch": Batch.prefill(tokens, lens, slots), "cache": self._prefill_cache(), "shape": shape,
                    "host_s": time.perf_counter() - t0}
        st = self._decode_state()
        ctx = list(st["ctx_next"])
        prep = {"ctx": ctx, "cache": st["cache"]}
        sp = self.layout.speculation
        q = self.layout.queries_per_step
        if sp is not None:
            prep["accepted"] = draw_accepted(self.rng, len(ctx), sp.num_tokens, self.me.acceptance(self.layout))
            st["ctx_next"] = [c + 1 + a for c, a in zip(ctx, prep["accepted"], strict=True)]
        else:
            st["ctx_next"] = [c + 1 for c in ctx]
        prep["batch"] = Batch.decode(st["tokens"], ctx)
        prep["shape"] = StepShape.decode(ctx, q)
        prep["host_s"] = time.perf_counter() - t0
        return prep

    def _prefill_cache(self):
        """One cache slot per prompt of a step, as long as the token budget."""
        if self.prefill_kv is None:
            lay = self.layout
            self.prefill_kv = self.model.kv_cache(lay.max_batch_per_rank, lay.max_tokens_per_step)
        return self.prefill_kv

    def _prepare_ahead(self, step: int) -> dict:
        """`prepare` on the worker thread (async scheduling); on GPU its copies on the side stream."""
        if self.side is None:
            return self.prepare(step)
        with torch.cuda.stream(self.side):
            prep = self.prepare(step)
            prep["ready"] = torch.cuda.Event()
            prep["ready"].record(self.side)
        return prep

    def _fill_tokens(self, prep: dict):
        batch = prep["batch"]
        if "ready" in prep:  # the step's stream waits for the side stream's copies, and owns them
            main = torch.cuda.current_stream()
            main.wait_event(prep["ready"])
            for t in (batch.tokens, batch.pos, batch.ends, batch.slots):
                if isinstance(t, torch.Tensor):
                    t.record_stream(main)
        if self.role == "decode":
            batch.tokens = self.decode_state["tokens"]
        return batch, prep["cache"], prep["shape"]

    def _decode_state(self) -> dict:
        if self.decode_state is None:
            b, lay = self.layout.max_batch_per_rank, self.layout
            ctx = decode_contexts(self.me.workload, b, self.rng)
            steps = self.me.cfg.warmup + self.me.cfg.steps + 2
            q = lay.queries_per_step
            max_ctx = max(ctx) + steps * q + 1
            cache = self.model.kv_cache(b, max_ctx)
            gen = torch.Generator(device=self.me.device).manual_seed(sub_seed(self.me.cfg.seed, "kv", self.dp_rank))
            for d in cache.data:
                d.normal_(generator=gen)
            tokens = torch.from_numpy(self.rng.integers(0, self.me.spec.vocab_size, b)).to(self.me.device)
            self.drafter = self.me.drafter(lay, b, max_ctx)
            self.decode_state = {"ctx_next": ctx, "cache": cache, "tokens": tokens}
        return self.decode_state

    def sample(self, out) -> dict:
        """Greedy sampling; decode feeds the next tokens back (the verify step's under speculation).
        Under async scheduling the tokens stay on the device (no host sync). Returns shape extras."""
        if isinstance(out, Speculation):
            self.decode_state["tokens"] = torch.tensor(out.next_tokens, device=self.me.device)
            return {"accepted": out.accepted, "greedy_accepted": out.greedy, "acceptance": "drawn",
                    "tokens_emitted": sum(len(e) for e in out.emitted),
                    "spec_depth": self.layout.speculation.num_tokens}
        nxt = out.argmax(-1)
        if self.pool is None:
            nxt.tolist()  # the host reads the sampled tokens (what a synchronous engine waits for)
        if self.role == "decode":
            self.decode_state["tokens"] = nxt
        return {}

    def _tokens_global(self, tokens: int) -> int:
        if self.replay is not None:
            return tokens * self.layout.dp
        if self.group is None:
            return tokens
        t = torch.tensor([tokens], dtype=torch.long, device=self.me.device if self.me.kind == "cuda" else "cpu")
        dist.all_reduce(t, group=self.group)
        return int(t.item()) // self.layout.tp

    def _tokens_min(self, tokens: int) -> int:
        """The fewest query tokens any rank of the instance runs this step."""
        if self.replay is not None or self.group is None:
            return tokens
        t = torch.tensor([tokens], dtype=torch.long, device=self.me.device if self.me.kind == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return int(t.item())

    def _reset_expert_rows(self):
        for layer in self.model.layers:
            if not layer.dense:
                layer.experts.rows = 0

    def _expert_shape(self) -> dict:
        """Token-expert pairs this rank's experts computed: mean over MoE layers, and per layer."""
        if self.replay is not None:
            return {"expert_tokens": self.replay.expert_tokens()}
        rows = [int(layer.experts.rows) for layer in self.model.layers if not layer.dense]  # after the step
        return {"expert_tokens": round(sum(rows) / len(rows)) if rows else 0, "expert_tokens_layers": rows}
