"""Per-rank main loops: prefill steps at the plan's token budget, decode steps at its batch per rank.

One rank's job (`run_rank`): for each instance of the plan (prefill, then decode), build the
rank's shard, run `warmup + steps` steps and turn each timed step into records. An instance whose
EP size fits the world runs for real over a process group (ranks 0..ep-1); a bigger one is
replayed (replay.py). Rank 0 gathers every rank's records at the end. Serving mode
(`RunConfig.serve`) runs serve.py's loop instead.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from rackplan.specs import SpecError, load_model, load_plan, load_workload, plan_hash

from .attention import sub_seed
from .model import Batch, Model, layer_ids
from .parallel import make_ep_group, world_info
from .records import base_record, step_records
from .replay import MODELLED_OPS, Replay
from .timing import StepTimer, wall
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
    skip_prefill: bool = False  # decode instance only
    fault: Optional[str] = None  # test hook: "raise:RANK" or "kill:RANK"


class Rank:
    """This process's identity, device and the plan it runs."""

    def __init__(self, cfg: RunConfig, rank: int, world: int):
        self.cfg, self.rank, self.world = cfg, rank, world
        self.kind = cfg.device
        self.device = f"cuda:{torch.cuda.current_device()}" if cfg.device == "cuda" else "cpu"
        self.plan = load_plan(cfg.plan)
        self.spec = load_model(self.plan.model)
        wl = cfg.workload or self.plan.workload
        self.workload = load_workload(wl) if wl else None
        name = torch.cuda.get_device_name() if cfg.device == "cuda" else f"cpu ({os.cpu_count()} cores)"
        self.base = base_record(self.plan, plan_hash(self.plan), name, world_info(), rank, world)
        from .attention import compute_dtype
        self.dtype = compute_dtype(self.spec, cfg.device)
        self.dtype_name = str(self.dtype).replace("torch.", "")

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


def instances(plan) -> list[tuple[str, object]]:
    """(role, layout) of the instances a benchmark run measures: one of each kind."""
    if plan.aggregated:
        return [("prefill", plan.aggregated[0]), ("decode", plan.aggregated[0])]
    return [("prefill", plan.prefill[0]), ("decode", plan.decode[0])]


def run_rank(cfg: RunConfig, rank: int, world: int) -> list[dict]:
    """One rank's whole run; returns all ranks' records on rank 0 (empty elsewhere)."""
    me = Rank(cfg, rank, world)
    if cfg.serve:
        from .serve import serve_rank
        return serve_rank(me)
    records = []
    for role, layout in instances(me.plan):
        if not (cfg.skip_prefill and role == "prefill"):
            records += run_instance(me, role, layout)
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(records, gathered, dst=0)
    return [r for part in gathered for r in part] if rank == 0 else []


def run_instance(me: Rank, role: str, layout) -> list[dict]:
    """Benchmark one instance: real EP when it fits the world, a replay otherwise."""
    if layout.tp != 1:
        raise SpecError(me.cfg.plan, f"{role}.tp", "1 (the executor runs DP attention + EP MoE)", layout.tp)
    if layout.pp != 1:
        raise SpecError(me.cfg.plan, f"{role}.pp", "1 (the executor runs one pipeline stage)", layout.pp)
    ep_n, measured = layout.ep_size, layout.ep_size <= me.world
    group = dist.new_group(list(range(ep_n))) if measured and ep_n > 1 else None
    if measured and me.rank >= ep_n:
        return []
    phase = "prefill" if role == "prefill" else "decode"
    ids = layer_ids(me.spec, phase, me.cfg.max_dense, me.cfg.max_moe)
    ep = make_ep_group(group, me.rank, ep_n, me.spec.moe.num_experts) if measured else None
    model = Model(me.spec, me.cfg.seed, me.device, me.dtype, ep, ids,
                  dbo=layout.dbo and me.kind == "cuda", build_experts=measured)
    replay = None if measured else Replay(model, me.plan, layout, me.rank, me.cfg.seed)
    if replay is not None:
        model.moe = replay.moe
    loop = StepLoop(me, role, layout, model, replay, group)
    return loop.run()


class StepLoop:
    """Runs and records the steps of one instance on one rank."""

    def __init__(self, me: Rank, role, layout, model: Model, replay: Optional[Replay], group):
        self.me, self.role, self.layout, self.model, self.replay, self.group = me, role, layout, model, replay, group
        self.rng = np.random.default_rng(sub_seed(me.cfg.seed, role, me.rank))
        self.timer = StepTimer(me.kind, group)
        n_dense = sum(layer.dense for layer in model.layers)
        self.n_dense, self.n_moe = n_dense, len(model.layers) - n_dense
        self.decode_state = None

    def run(self) -> list[dict]:
        out = []
        for step in range(self.me.cfg.warmup + self.me.cfg.steps):
            if step == self.me.cfg.warmup:
                self.me.fault("step")
            sec, shape = self.step(step)
            if step >= self.me.cfg.warmup:
                out += self.records(step - self.me.cfg.warmup, sec, shape)
        if self.role == "decode" and self.replay is not None and self.me.kind == "cuda" and \
                self.layout.cuda_graphs and self.me.cfg.cuda_graphs:
            from .graphs import graph_decode_records
            out += graph_decode_records(self)
        return out

    def records(self, step: int, sec: dict, shape: dict) -> list[dict]:
        modelled = ()
        shape.update(budget=self.layout.max_tokens_per_step, max_batch=self.layout.max_batch_per_rank)
        if self.replay is not None:
            sec.update(self.replay.modelled_a2a(shape["tokens"], self.n_moe, self.role))
            modelled = MODELLED_OPS
            shape = dict(shape, ep_plan=self.layout.ep_size, world_measured=self.me.world,
                         replayed_rank=self.me.rank, layers_run=len(self.model.layers))
        return step_records(self.me.base, self.role, self.layout, step, sec, shape, self.me.dtype_name,
                            self.n_dense, self.n_moe, modelled)

    def step(self, step: int) -> tuple[dict, dict]:
        t0 = time.perf_counter()
        batch, cache, shape = self.prepare(step)
        prep_s = time.perf_counter() - t0
        self._reset_expert_rows()
        if self.replay is not None:
            self.replay.prepare(shape["tokens"], step)
        shape["tokens_global"] = self._tokens_global(shape["tokens"])
        self.timer.reset()
        if self.group is not None:
            dist.barrier(group=self.group)
        with wall(self.me.kind) as w:
            logits = self.model.forward(batch, cache, self.timer)
            if self.me.kind == "cuda":
                torch.cuda.synchronize()
            with self.timer.section("host", host=True):
                self.sample(logits)
        sec = self.timer.collect()
        sec["host"] = sec.get("host", 0.0) + prep_s
        sec["step"] = w["seconds"] + prep_s
        shape["expert_tokens"] = self._expert_rows()
        return sec, shape

    def prepare(self, step: int):
        """Host work before the forward: the batch, its metadata, the cache (decode)."""
        if self.role == "prefill":
            lens = prefill_lengths(self.me.workload, self.layout.max_tokens_per_step,
                                   self.layout.max_batch_per_rank, self.rng)
            tokens = torch.from_numpy(self.rng.integers(0, self.me.spec.vocab_size, sum(lens))).to(self.me.device)
            shape = {"batch": len(lens), "tokens": sum(lens), "ctx_sum": sum(lens), "prefill_new": lens,
                     "prefill_prefix": [0] * len(lens)}
            return Batch.prefill(tokens, lens), None, shape
        st = self._decode_state()
        batch = Batch.decode(st["tokens"], st["ctx"])
        shape = {"batch": len(st["ctx"]), "tokens": len(st["ctx"]), "ctx_sum": sum(c + 1 for c in st["ctx"])}
        return batch, st["cache"], shape

    def _decode_state(self) -> dict:
        if self.decode_state is None:
            b = self.layout.max_batch_per_rank
            ctx = decode_contexts(self.me.workload, b, self.rng)
            cache = self.model.kv_cache(b, max(ctx) + self.me.cfg.warmup + self.me.cfg.steps + 2)
            gen = torch.Generator(device=self.me.device).manual_seed(sub_seed(self.me.cfg.seed, "kv", self.me.rank))
            for d in cache.data:
                d.normal_(generator=gen)
            tokens = torch.from_numpy(self.rng.integers(0, self.me.spec.vocab_size, b)).to(self.me.device)
            self.decode_state = {"ctx": ctx, "cache": cache, "tokens": tokens}
        return self.decode_state

    def sample(self, logits: torch.Tensor) -> None:
        """Greedy sampling; decode feeds the sampled tokens back and grows each context by one."""
        nxt = logits.argmax(-1)
        ids = nxt.tolist()
        if self.role == "decode":
            st = self.decode_state
            st["tokens"] = nxt
            st["ctx"] = [c + 1 for c in st["ctx"]]
        return ids

    def _tokens_global(self, tokens: int) -> int:
        if self.replay is not None:
            return tokens * self.layout.dp
        if self.group is None:
            return tokens
        t = torch.tensor([tokens], dtype=torch.long, device=self.me.device if self.me.kind == "cuda" else "cpu")
        dist.all_reduce(t, group=self.group)
        return int(t.item())

    def _reset_expert_rows(self):
        for layer in self.model.layers:
            if not layer.dense:
                layer.experts.rows = 0

    def _expert_rows(self) -> int:
        if self.replay is not None:
            return self.replay.expert_tokens()
        rows = [layer.experts.rows for layer in self.model.layers if not layer.dense]
        return round(sum(rows) / len(rows)) if rows else 0
