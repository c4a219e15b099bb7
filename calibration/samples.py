"""Measured steps as the cost model sees them: one RankBatch per step plus measured seconds per op.

Records of one step (all ranks) become a `StepSample`: per-rank decode batch and context, prefill
chunks, and per op the slowest rank's seconds (the cost model prices the slowest rank, an EP step
waits for it). Sweep steps of one shape collapse to medians, in two levels: the median over each
run's steps, then the median over runs. The machine is shared, and a neighbour's burst slows a
whole run (2x for seconds at a time), so a shape needs repeated runs and the median of their
medians, not one long run. Serving-mode steps are all different; they stay one sample each.

Shape of a step: decode by the batch per rank (contexts within a sweep point differ only by the
workload's draw; the sample carries their median), prefill by the new tokens per rank (the token
budget when the budget is filled; the chunk mix of the median step is the sample's).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from rackplan.executor.step_shape import StepShape
from rackplan.sim.cost.step import RankBatch
from rackplan.specs import HardwareSpec, Layout, Plan, SpecError

# host parts a step record's wall time covers unless its shape says (shape["host_parts"]): input
# preparation, launches and sampling (the executor's loop times scheduling apart)
IN_STEP_PARTS = ("host.prepare", "host.launch", "host.sample")


@dataclass
class StepSample:
    """One step shape (medians over its repeats) on one instance role."""

    role: str  # prefill | decode
    size: int  # decode: sequences per rank; prefill: new tokens per rank (what sweeps vary)
    rb: RankBatch
    ops: dict[str, float]  # measured seconds per op (slowest rank)
    step_s: float
    host_s: float
    repeats: int = 1  # steps behind the medians
    steps: list[int] = field(default_factory=list)
    runs: int = 1  # runs (measurement files) behind the medians
    serve: bool = False  # a serving-mode step (one step, never merged)
    run: int = 0

    parts: tuple[str, ...] = ()  # host parts its wall time covers (records' shape["host_parts"])
    busy_ranks: int = 1  # ranks that ran at once while it was measured (a sweep step: its instance's; serving: all)

    def __post_init__(self):
        self.parts = tuple(self.parts) or IN_STEP_PARTS

    def alone(self, hw: HardwareSpec) -> "StepSample":
        """This step as one rank alone would run it: on a CPU rig whose cores its busy ranks shared, every
        measured second / HardwareSpec.core_share(busy_ranks) (the cost model prices a rank alone and applies
        the share of the plan it prices: sim/cost/cores.py). Itself where no core was shared."""
        share = hw.core_share(self.busy_ranks)
        if share == 1.0:
            return self
        return replace(self, ops={k: v / share for k, v in self.ops.items()}, step_s=self.step_s / share,
                       host_s=self.host_s / share, busy_ranks=1)


def layout_for(plan: Plan, role: str) -> Layout:
    """The instance layout a role's steps ran on."""
    pool = {"prefill": plan.prefill, "decode": plan.decode}.get(role) or plan.aggregated
    if not pool:
        raise SpecError(plan.name, role, "a layout for this role in the plan")
    return pool[0]


def step_samples(records: list[dict], plan: Plan) -> list[StepSample]:
    """Collapse measured records (not request records) into median step samples per shape.
    Records may carry `_run` (which file they came from, see io.read_runs): step numbers restart
    in every run."""
    return samples_of(raw_steps(records, plan))


def samples_of(raw: list[StepSample]) -> list[StepSample]:
    """Median step samples per shape of the steps `raw` (raw_steps)."""
    return [_median(g) for g in shape_groups(raw).values()]


def shape_groups(raw: list[StepSample]) -> dict[tuple, list[StepSample]]:
    """Steps (one sample each) grouped by shape: a sweep point's steps over all its runs; a serving step alone."""
    groups: dict[tuple, list[StepSample]] = {}
    for s in raw:
        groups.setdefault(_shape_key(s), []).append(s)
    return groups


def raw_steps(records: list[dict], plan: Plan) -> list[StepSample]:
    """One sample per measured step (all its ranks' records), in (run, role, instance, step) order."""
    by_step: dict[tuple, list[dict]] = {}
    for r in records:
        if r["op"] == "request" or r["source"] != "measured":
            continue
        key = (r.get("_run", 0), r["plan_hash"], r["role"], r["shape"].get("instance", ""), r["step"])
        by_step.setdefault(key, []).append(r)  # steps of one instance (replicas number theirs apart)
    raw = [_one_step(run, role, step, recs, plan) for (run, _, role, _, step), recs in sorted(by_step.items())]
    return [s for s in raw if s is not None]


def _one_step(run: int, role: str, step: int, recs: list[dict], plan: Plan) -> StepSample | None:
    serve = role == "serve" or any(r["shape"].get("time_shared") or r["shape"].get("serving")
                                   for r in recs)  # serving-mode steps
    if role == "serve":  # prefill if any rank ran prompt tokens
        role = "prefill" if any(r["shape"].get("prefill_new") for r in recs) else "decode"
    ranks = layout_for(plan, role).dp
    dec_b, dec_c = np.zeros(ranks), np.zeros(ranks)
    pre_new = [np.zeros(0) for _ in range(ranks)]
    pre_pre = [np.zeros(0) for _ in range(ranks)]
    ops: dict[str, float] = {}
    host_s = 0.0
    steps: dict[int, float] = {}  # per rank: its step record, less the plan it waited for (`plan_seconds`)
    for r in recs:
        shp = StepShape.from_record(r["shape"]) if r["role"] != "serve" else None
        steps[r["rank"]] = steps.get(r["rank"], 0.0) + (r["seconds"] if r["op"] == "step" else 0.0) \
            - plan_seconds(r)
        if r["op"] == "host":
            host_s = max(host_s, r["seconds"])
        elif r["op"] != "step":
            ops[r["op"]] = max(ops.get(r["op"], 0.0), r["seconds"])
        if shp is None:
            continue
        k, work = (r["rank"] if shp.dp_rank is None else shp.dp_rank) % ranks, shp.to_rank_work()
        if work.chunks:
            pre_new[k] = np.array([n for _, n, _ in work.chunks])
            pre_pre[k] = np.array([p for _, _, p in work.chunks])
        else:
            dec_b[k], dec_c[k] = work.dec_seqs, work.dec_ctx
    step_s = max(steps.values(), default=0.0)
    if step_s <= 0:
        return None  # a step without its wall time cannot be compared
    rb = RankBatch(dec_b, dec_c, pre_new, pre_pre) if role == "prefill" else RankBatch(dec_b, dec_c)
    if role == "prefill" and not np.any(dec_b):
        rb = RankBatch(np.zeros(ranks), np.zeros(ranks), pre_new, pre_pre)
    size = int(max(float(np.sum(n)) for n in pre_new)) if role == "prefill" else int(np.max(dec_b))
    parts = next((tuple(r["shape"]["host_parts"]) for r in recs if r["shape"].get("host_parts")), ())
    busy = max(r["world_size"] for r in recs) if serve else len({r["rank"] for r in recs})
    return StepSample(role, size, rb, ops, step_s, host_s, 1, [step], serve=serve, run=run, parts=parts,
                      busy_ranks=busy)


def plan_seconds(r: dict) -> float:
    """A record's share of the plan its step waited for, where a separate instance's serving loop (shape
    time_shared false) put that plan inside its step record (executor/disagg.py: step += the plan's
    seconds, host.exposed = the plan + sampling): host.exposed counts +, host.sample - (their difference is
    the plan: the scheduler and its control-plane round trips). The loop's host terms price that time
    (calibration/fit.py fit_loop_host), so the step the fit sees is the forward, as a benchmark step's."""
    if r["shape"].get("time_shared") is not False or r["op"] not in ("host.exposed", "host.sample"):
        return 0.0
    return r["seconds"] if r["op"] == "host.exposed" else -r["seconds"]


def _shape_key(s: StepSample) -> tuple:
    if s.serve:
        return ("serve", s.role, s.run, s.steps[0])
    if s.role == "prefill":
        return ("prefill", tuple(int(np.sum(n)) for n in s.rb.pre_new))
    return ("decode", tuple(s.rb.dec_batch.astype(int)))


def _attn_work(s: StepSample) -> float:
    """Attention pairs of a prefill step (which chunk mix is the median one)."""
    return float(sum(np.sum(n * (p + n / 2)) for n, p in zip(s.rb.pre_new, s.rb.pre_prefix)))


def _median(group: list[StepSample]) -> StepSample:
    """Per op: the median of each run's median, then the median over runs."""
    first = group[0]
    if len(group) == 1:
        return first
    runs: dict[int, list[StepSample]] = {}
    for s in group:
        runs.setdefault(s.run, []).append(s)

    def med(get) -> float:
        vals = ([v for v in map(get, ss) if v is not None] for ss in runs.values())
        return float(np.median([np.median(v) for v in vals if v]))

    names = {n for s in group for n in s.ops}
    ops = {n: med(lambda s, n=n: s.ops.get(n)) for n in names}
    if first.role == "decode":
        rb = RankBatch(first.rb.dec_batch, np.median([s.rb.dec_ctx for s in group], axis=0))
    else:
        work = sorted(group, key=_attn_work)
        rb = work[len(work) // 2].rb
    return StepSample(first.role, first.size, rb, ops, med(lambda s: s.step_s), med(lambda s: s.host_s),
                      len(group), [n for s in group for n in s.steps], len(runs), first.serve, first.run, first.parts,
                      max(s.busy_ranks for s in group))


def split_holdout(samples: list[StepSample], holdout: dict[str, set[int]]) -> tuple[list, list]:
    """(fit, held-out) by role and size: e.g. {"decode": {4, 12}} holds out decode batches 4 and 12.
    Serving-mode steps are never fitted on."""
    sweep = [s for s in samples if not s.serve]
    held = [s for s in sweep if s.size in holdout.get(s.role, set())]
    fit = [s for s in sweep if s.size not in holdout.get(s.role, set())]
    return fit, held
