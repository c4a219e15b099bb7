"""Fit the host model (the profile's `host:` block, sim/cost/host.py) from the executor's per-part
host records, part by part, and measure it on held-out step sizes.

The serving loops record, per step, host.schedule / host.dp_sync / host.output on the instance's
leader rank and host.prepare / host.sample on every rank (executor/disagg.py, executor/serve.py),
each with its wall time and (cpu_s) the thread's CPU time. A part's own work is its CPU time, which
a neighbour's load on a shared machine does not stretch. host.dp_sync is fitted on its CPU time
too: the leader's own work in the DP collective (the tick's broadcast). The rest of its wall time,
the wait for the other ranks (DP_WAIT), is kept per step and reported, not fitted: on a 2-core
machine running three ranks it is the OS scheduling the ranks (its medians over runs of one shape
spread 150-190%), not host work that dp_jitter's straggle model could price.
One `HostStep` per (run, instance, step) holds each part's seconds (for the per-rank parts the
busiest rank's: _busiest) and what the step ran on every rank, with the requests the instance
admitted and finished in it. Each instance's first WARMUP_STEPS steps (its host code cold), and every
step that follows an idle wait of its loop (cold again), are left out of fit and held-out shapes
alike. Steps of one shape (role, DP size, draft depth, sequences on the busiest rank) collapse to
medians: per run, then over runs (the machine is shared: a neighbour's
burst slows whole stretches of a run); the model's value for a shape is its per-step predictions
collapsed the same way (a shape mixes steps that admit or finish requests with steps that do not).
Each part is then fitted on the shapes of the fit set by calibration/robust.py's soft-L1 relative
least squares, predicting through sim/cost/host.py's own HostModel (the cost model's formulas,
nothing re-derived here):
  host.schedule  schedule_step_s, schedule_per_rank_s, schedule_per_seq_s, schedule_per_admit_s,
                 schedule_spec_s (the instance's ranks, sequences and admitted requests: the
                 executor's leader schedules every DP rank, HostParams.scheduler 'central')
  host.prepare   prepare_step_s, prepare_per_seq_s, prepare_per_token_s, prepare_spec_s (signed: a
                 speculative step's difference; on the CPU executor its first torch call runs
                 warmer than a plain step's, so it comes out < 0, SIGNED)
  host.sample    sample_step_s, sample_per_seq_s, sample_per_draft_s, spec_sync_s (a speculative
                 step's host work that waits for its device result: on CPU the rejection
                 sampler's fixed cost after the verify forward; 0 without speculation)
  host.output    output_step_s, output_per_seq_s, output_per_token_s, output_per_finish_s,
                 output_spec_s (sequences booked, emitted tokens and finished requests of the
                 instance: the executor's booking updates each seat once, whatever it emitted)
  host.dp_sync   dp_sync_s (steps of instances with DP > 1; dp_jitter keeps the base's value)
Launches (inside the CPU executor's op times) and the API server (the executor has none) keep the
base profile's values.

Probe normalisation (probe_fit; `calibrate --host-probe`, opt-in: on a loaded machine it did not lower the
held-out error, benchmarks/RESULTS.md, hostfit4): whole runs of one shape run 7-16% faster or slower than one another,
every part of a run together (the VM's speed drifts from run to run and hour to hour; benchmarks/RESULTS.md,
issue 15), and that drift, not the model's form, is most of a part's held-out error. Runs that record the
executor's CPU-speed probe (op host.probe, executor/probe.py: a fixed workload each rank times at the start
and the end of its timed window) have each host part scaled by (PROBE_REF / the run's probe) ** the part's
slope, the run's probe the median of its ranks' start and end probes and PROBE_REF the median probe of the
loop's runs: the fitted block is in this machine's seconds at its median speed over the sweep (so a sweep on
another machine keeps that machine's speed). A part's slope (probe_slopes) is how much of the probe's ratio it
follows, learnt on the fit set alone, model-free: within each fit-set shape, its runs' log part time on their
log probe. Held-out shapes are scaled by their own runs' probes with those slopes, exactly as the fit set.
The DP wait (DP_WAIT: OS scheduling, not host work) is not scaled. Runs without probes are fitted as measured.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from rackplan.sim.cost.host import HostModel, RankHost
from rackplan.specs import HardwareSpec, HostParams, Layout, ModelSpec, Speculation

from .robust import fit_relative, mape

PART_PARAMS = {  # the HostParams fields each part is fitted by (upper bound: 1 s each)
    "host.schedule": ("schedule_step_s", "schedule_per_rank_s", "schedule_per_seq_s", "schedule_per_admit_s",
                      "schedule_spec_s"),
    "host.prepare": ("prepare_step_s", "prepare_per_seq_s", "prepare_per_token_s", "prepare_spec_s"),
    "host.sample": ("sample_step_s", "sample_per_seq_s", "sample_per_draft_s", "spec_sync_s"),
    "host.output": ("output_step_s", "output_per_seq_s", "output_per_token_s", "output_per_finish_s", "output_spec_s"),
    "host.dp_sync": ("dp_sync_s",),
}
# a signed difference between two kinds of step -> the fixed part it adds to: the fit varies their
# sum (that kind of step's fixed part, >= 0 as every other term) and writes the difference
SIGNED = {"prepare_spec_s": "prepare_step_s"}
MIN_SHAPES = 3  # step shapes a part needs before it is fitted (else it keeps the base value)
MIN_STEPS = 5  # steps behind a shape's medians before it counts (fill and drain pass sizes once)
# An instance's first steps run its host code cold (first calls, allocator growth, caches): the
# parts' per-step times over those of later steps of the same run and shape are 1.3-3.4x at step 0
# and settle within ~5% from step 8 on (benchmarks/host_sweep.py prints the profile). Fit and
# held-out shapes both leave them out; a serving engine pays them once, at start-up.
WARMUP_STEPS = 8
# A step that follows an idle wait (the loop found no work and slept: a closed loop's prefill between
# arrivals, a decode loop waiting for its next KV) runs its host code cold too: prefill schedule and
# prepare 1.3-2x a back-to-back step of the same size (benchmarks/host_sweep.py prints the ratio). Fit
# and held-out shapes leave such steps out (records of loops that predate `idle_before_s` count as busy):
# the host model prices a busy engine's steps, where host time decides throughput.
DP_WAIT = "host.dp_sync.wait"  # a step's DP wait: host.dp_sync's wall less its CPU time (reported, not fitted)
PROBE = "host.probe"  # the executor's CPU-speed probe records (executor/probe.py)
PROBE_SLOPE_MAX = 1.5  # a part that follows the probe more than 1.5x is noise, not speed


@dataclass
class HostStep:
    """One step (or the median of one step shape) as the host model sees it."""

    role: str
    dp: int
    depth: int  # draft tokens per sequence
    ranks: list[RankHost]  # what each DP rank ran
    whole: RankHost  # what the instance ran (the central scheduler's work)
    parts: dict[str, float]  # measured seconds per host part
    run: int = 0
    index: int = 0  # the step's number in its instance's loop (0: the first step it ran)
    idle_s: float = 0.0  # wall seconds the loop waited idle just before this step
    steps: int = 1  # steps behind the medians
    members: tuple = ()  # a shape's steps, per run (tuples of HostSteps): what its medians came from

    @property
    def size(self) -> int:
        """Sequences on the busiest rank (what a sweep of batch sizes varies)."""
        return int(max(w.seqs for w in self.ranks))

    @property
    def key(self) -> tuple:
        return (self.role, self.dp, self.depth, self.size, self.whole.tokens > self.whole.seqs * (1 + self.depth))


def host_steps(records: list[dict]) -> list[HostStep]:
    """One HostStep per (run, instance, step) that recorded host parts."""
    by_step: dict[tuple, list[dict]] = {}
    for r in records:
        if r["op"].startswith("host.") and r["role"] in ("prefill", "decode") and r["source"] == "measured":
            key = (r.get("_run", 0), r["shape"].get("instance", r["role"]), r["role"], r["step"])
            by_step.setdefault(key, []).append(r)
    out = []
    for (run, _, role, index), recs in sorted(by_step.items()):
        step = _one(run, role, index, recs)
        if step is not None:
            out.append(step)
    return out


def run_probes(records: list[dict]) -> dict[int, float]:
    """Per run (`_run`): the median over its ranks' probes (start, end and in place: executor/probe.py) of the
    probe's thread CPU seconds (runs without probe records are absent)."""
    by_run: dict[int, list[float]] = {}
    for r in records:
        if r["op"] == PROBE and r["source"] == "measured":
            by_run.setdefault(r.get("_run", 0), []).append(float(r.get("cpu_s", r["seconds"])))
    return {run: float(np.median(v)) for run, v in by_run.items()}


def probe_scaled(steps: list[HostStep], probes: dict[int, float],
                 slopes: dict[str, float] | None = None) -> tuple[list[HostStep], float | None]:
    """`steps` with each host part but the DP wait scaled by (PROBE_REF / its run's probe) ** its slope (1 for
    every part without `slopes`; PROBE_REF the median probe over the runs, the module docstring), and that
    median; unchanged (and None) unless every run of `steps` has a probe."""
    runs = {s.run for s in steps}
    if not runs or not runs <= set(probes) or min(probes[r] for r in runs) <= 0:
        return steps, None
    ref = float(np.median([probes[r] for r in runs]))
    out = [dataclasses.replace(s, parts={n: v * (ref / probes[s.run]) ** (1.0 if slopes is None else slopes.get(n, 0.0))
                                         if n != DP_WAIT else v for n, v in s.parts.items()}) for s in steps]
    return out, ref


def probe_slopes(shapes: list[HostStep], probes: dict[int, float]) -> dict[str, float]:
    """Per part: how much of the probe's run-to-run ratio the part follows, learnt without the model: over the
    per-run `shapes` (one run's median steps of one shape each), the pooled within-shape least squares slope of
    log(part seconds) on log(the run's probe), each shape's runs taken about their own mean (a shape's runs
    differ by the machine's speed only); within [0, PROBE_SLOPE_MAX], 1 where fewer than MIN_SHAPES shapes have
    two runs with different probes."""
    groups: dict[tuple, list[HostStep]] = {}
    for s in shapes:
        groups.setdefault(s.key, []).append(s)
    out = {}
    for part in PART_PARAMS:
        xs, ys = [], []  # per shape with runs of different probes: logs about the shape's own mean
        for group in groups.values():
            pts = [(np.log(probes[s.run]), np.log(s.parts[part])) for s in group if s.parts.get(part, 0) > 0]
            x, y = np.array(pts).T if len(pts) >= 2 else (np.zeros(1), np.zeros(1))
            if np.ptp(x) > 0:
                xs.append(x - x.mean())
                ys.append(y - y.mean())
        if len(xs) >= MIN_SHAPES:
            x, y = np.concatenate(xs), np.concatenate(ys)
            out[part] = float(np.clip(np.dot(x, y) / np.dot(x, x), 0.0, PROBE_SLOPE_MAX))
    return out


def _one(run: int, role: str, index: int, recs: list[dict]) -> HostStep | None:
    per_part: dict[str, list[tuple[int, float]]] = {}
    per_rank: dict[int, dict] = {}
    for r in recs:
        sec, batch = r.get("cpu_s", r["seconds"]), int(r["shape"].get("batch", 0))
        per_part.setdefault(r["op"], []).append((batch, sec))
        if r["op"] == "host.dp_sync":
            per_part.setdefault(DP_WAIT, []).append((batch, max(r["seconds"] - sec, 0.0)))
        per_rank[r["shape"].get("dp_rank", r["rank"])] = r["shape"]
    parts = {op: _busiest(vals) for op, vals in per_part.items()}
    shp = next(iter(per_rank.values()))
    if "seqs_global" not in shp:
        return None  # records of a loop that does not time its host parts
    dp, depth = int(recs[0]["instance_dp"]), int(shp.get("spec_depth", 0))
    admitted, finished = _turnover(shp, role)
    ranks = [_rank(s, role, depth, admitted / dp, finished / dp) for s in per_rank.values()]
    ranks += [RankHost(0.0, 0.0, 0.0, 0.0)] * (dp - len(ranks))  # idle ranks: dummy steps
    tokens = float(shp.get("tokens_global", 0))
    whole = RankHost(float(shp["seqs_global"]), tokens, float(shp.get("emitted_global", 0)),
                     float(shp["seqs_global"]) * depth if role == "decode" else 0.0, admitted, finished)
    return HostStep(role, dp, depth, ranks, whole, parts, run, index, float(shp.get("idle_before_s", 0.0)))


def _busiest(vals: list[tuple[int, float]]) -> float:
    """A part's seconds on the rank that ran the most sequences (the mean over ranks that ran as
    many): the work the host model prices for the slowest rank. Not the per-step maximum: how much
    later than its peers one rank finishes is the DP wait (host.dp_sync's wall time, DP_WAIT)."""
    top = max(b for b, _ in vals)
    return float(np.mean([v for b, v in vals if b == top]))


def _turnover(shape: dict, role: str) -> tuple[float, float]:
    """(admitted, finished) requests of a decode step's instance, as the simulator's decode instances
    price them (sim/decode.py); prefill steps price none (the simulator's prefill steps carry none)."""
    if role != "decode":
        return 0.0, 0.0
    return float(shape.get("admitted_global", 0)), float(shape.get("finished_global", 0))


def _rank(shape: dict, role: str, depth: int, admitted: float, finished: float) -> RankHost:
    seqs, tokens = float(shape.get("batch", 0)), float(shape.get("tokens", 0))
    emitted = float(shape.get("tokens_emitted", seqs)) if role == "decode" else float(len(shape.get("prefill_new", [])))
    return RankHost(seqs, tokens, emitted, seqs * depth if role == "decode" else 0.0, admitted, finished)


def steady(steps: list[HostStep], warmup: int = WARMUP_STEPS, busy: bool = True) -> list[HostStep]:
    """The steps after each instance's first `warmup` steps (`busy`: and not after an idle wait)."""
    return [s for s in steps if s.index >= warmup and not (busy and s.idle_s > 0)]


def medians(steps: list[HostStep]) -> list[HostStep]:
    """Steps of one shape collapsed: per part the median over each run's median."""
    groups: dict[tuple, list[HostStep]] = {}
    for s in steps:
        groups.setdefault(s.key, []).append(s)
    out = []
    for group in groups.values():
        runs: dict[int, list[HostStep]] = {}
        for s in group:
            runs.setdefault(s.run, []).append(s)
        names = {n for s in group for n in s.parts}
        parts = {n: float(np.median([np.median([s.parts[n] for s in ss if n in s.parts]) for ss in runs.values()
                                     if any(n in s.parts for s in ss)])) for n in names}
        mid = sorted(group, key=lambda s: s.whole.seqs)[len(group) // 2]
        out.append(dataclasses.replace(mid, parts=parts, steps=len(group), members=tuple(map(tuple, runs.values()))))
    return sorted(out, key=lambda s: s.key)


@dataclass
class HostFit:
    """The fitted host block and its error per part (MAPE %, fit set and held-out sizes)."""

    host: HostParams
    fit_error: dict[str, float] = field(default_factory=dict)
    held_error: dict[str, float] = field(default_factory=dict)
    points: dict[str, tuple[int, int]] = field(default_factory=dict)  # part -> (fit shapes, held-out shapes)
    probe_ref: float | None = None  # fitted in probe-normalised time at this probe (s; probe_fit), else as measured
    slopes: dict[str, float] = field(default_factory=dict)  # part -> how much of the probe's ratio it follows


class HostPredictor:
    """The host parts sim/cost/host.py prices for a HostStep (HostModel of an instance of the step's
    role and DP size: what the host parts depend on besides the step)."""

    def __init__(self, model: ModelSpec, hw: HardwareSpec):
        self.model, self.hw = model, hw
        self._groups: dict[tuple[int, str], tuple] = {}  # (id of a shape, part) -> (shape, its distinct steps, runs)

    def parts(self, hp: HostParams, s: HostStep, memo: dict | None = None) -> dict[str, float]:
        memo = {} if memo is None else memo
        key = ("model", s.role, s.dp, s.depth)
        if key not in memo:
            spec = Speculation(num_tokens=s.depth, acceptance_length=1.0) if s.depth else None  # parts: drafts given
            lay = Layout(s.role, dp=s.dp, cuda_graphs=False, async_scheduling=False, speculation=spec)
            memo[key] = HostModel(hp, lay, self.model.num_layers, self.hw.gpus_per_node, self.hw.host_overlap)
        return memo[key].time(s.ranks, 0.0, False, 0.0, s.whole).as_dict()

    def shape_part(self, hp: HostParams, s: HostStep, part: str, memo: dict) -> float:
        """A part's seconds for a shape of medians: the per-step predictions of the steps behind it
        collapsed as its measurements were (per run, then over runs); `memo` keeps the prediction
        of each distinct step under `hp`."""
        if not s.members:
            return self.parts(hp, s, memo)[part]
        _, distinct, runs = self._grouped(s, part)
        vals = np.array([memo[key] if key in memo else memo.setdefault(key, self.parts(hp, m, memo)[part])
                         for key, m in distinct])
        return float(np.median([np.median(vals[ids]) for ids in runs]))

    def _grouped(self, s: HostStep, part: str) -> tuple:
        """(s, the distinct steps behind shape `s` that recorded `part` as (key, step), per run the
        indices of its steps into them): what a shape's prediction needs, worked out once."""
        hit = self._groups.get((id(s), part))
        if hit is not None:
            return hit
        distinct: list[tuple[tuple, HostStep]] = []
        index: dict[tuple, int] = {}
        runs = []
        for run in s.members:
            ids = []
            for m in run:
                if part in m.parts:
                    key = (part, m.role, m.dp, m.depth, tuple(m.ranks), m.whole)
                    ids.append(index.setdefault(key, len(index)))
                    if len(distinct) < len(index):
                        distinct.append((key, m))
            if ids:
                runs.append(np.array(ids))
        hit = self._groups[(id(s), part)] = (s, distinct, runs)  # holds s: its id stays its own
        return hit


def fit_host_parts(pred: HostPredictor, steps: list[HostStep], base: HostParams, role: str,
                   held_sizes: set[int] = frozenset(), params: dict[str, tuple[str, ...]] | None = None,
                   warmup: int = WARMUP_STEPS, busy: bool = True) -> HostFit:
    """Each part's parameters (`params`, default PART_PARAMS; the others keep `base`'s values) on the
    `role` step shapes whose size is not in `held_sizes` (shapes of at least MIN_STEPS steps after
    each instance's first `warmup`, `busy`: and not after an idle wait), errors on both sets."""
    hp = dataclasses.replace(base, scheduler="central")
    shapes = [s for s in medians([s for s in steady(steps, warmup, busy) if s.role == role])
              if s.steps >= MIN_STEPS]
    fit_set = [s for s in shapes if s.size not in held_sizes]
    held = [s for s in shapes if s.size in held_sizes]
    out = HostFit(hp)
    for part, names in (PART_PARAMS if params is None else params).items():
        fs = [s for s in fit_set if s.parts.get(part, 0.0) > 0]
        names = tuple(n for n in names if _moves(pred, hp, part, n, fs))  # others: nothing in the data prices them
        if not names or len(fs) < max(MIN_SHAPES, len(names)):
            continue
        hp = _fit_part(pred, hp, part, names, fs)
        hs = [s for s in held if s.parts.get(part, 0.0) > 0]
        out.fit_error[part] = _err(pred, hp, part, fs)
        if hs:
            out.held_error[part] = _err(pred, hp, part, hs)
        out.points[part] = (len(fs), len(hs))
    out.host = hp
    return out


def fit_loops(pred: HostPredictor, steps: list[HostStep], base: HostParams, base_prefill: HostParams,
              held_sizes: set[int] = frozenset(), prefill_runs: set[int] | None = None,
              probes: dict[int, float] | None = None) -> tuple[HostFit, HostFit]:
    """(decode fit, prefill fit) of a sweep's steps, each loop's block from its own runs: with `prefill_runs`
    (run indices), the prefill loop is fitted from those runs' steps only and the decode loop from every other
    run's (a prefill sweep's decode instance serves other requests than the decode grid: one-token bursts);
    without, both from every run. `probes` (run_probes): each loop in probe-normalised time (probe_fit)."""
    dec = [s for s in steps if prefill_runs is None or s.run not in prefill_runs]
    pre = [s for s in steps if prefill_runs is None or s.run in prefill_runs]
    return (probe_fit(pred, dec, base, "decode", held_sizes, probes),
            probe_fit(pred, pre, base_prefill, "prefill", held_sizes, probes))


def probe_fit(pred: HostPredictor, steps: list[HostStep], base: HostParams, role: str,
              held_sizes: set[int] = frozenset(), probes: dict[int, float] | None = None) -> HostFit:
    """fit_host_parts, in probe-normalised time where every run of `role` has a probe: each part's slope on
    the probe from the fit set's shapes (probe_slopes), every run (held-out ones by their own probe) scaled by
    it; the fit's probe_ref and slopes say what was done (as measured, probe_ref None, without probes)."""
    mine = [s for s in steps if s.role == role]
    _, ref = probe_scaled(mine, probes or {})
    if ref is None:
        return fit_host_parts(pred, mine, base, role, held_sizes)
    per_run = [s for run in sorted({s.run for s in mine}) for s in medians(steady([m for m in mine if m.run == run]))
               if s.steps >= MIN_STEPS and s.size not in held_sizes]
    slopes = {p: probe_slopes(per_run, probes).get(p, 1.0) for p in PART_PARAMS}
    scaled, _ = probe_scaled(mine, probes, slopes)
    fit = fit_host_parts(pred, scaled, base, role, held_sizes)
    return dataclasses.replace(fit, probe_ref=ref, slopes=slopes)


def _moves(pred: HostPredictor, hp: HostParams, part: str, name: str, fs: list[HostStep]) -> bool:
    """Whether parameter `name` changes `part` on any of the steps `fs` (a step feature the
    records never vary, e.g. admissions in records that do not count them, leaves its term at the
    base value)."""
    bumped = dataclasses.replace(hp, **{name: getattr(hp, name) + 1e-3})
    a, b = {}, {}
    return any(pred.shape_part(bumped, s, part, b) != pred.shape_part(hp, s, part, a) for s in fs)


def _fit_part(pred: HostPredictor, hp: HostParams, part: str, names: tuple[str, ...], fs: list[HostStep]):
    meas = np.array([s.parts[part] for s in fs])

    def make(p):
        vals = {n: float(v) for n, v in zip(names, p)}
        for n, base in SIGNED.items():
            if n in vals:  # the fit's variable is the sum
                vals[n] -= vals.get(base, getattr(hp, base))
        return dataclasses.replace(hp, **vals)

    def predict(p):
        h, memo = make(p), {}
        return np.array([pred.shape_part(h, s, part, memo) for s in fs])

    x0 = [max(getattr(hp, n) + (getattr(hp, SIGNED[n]) if n in SIGNED else 0.0), 1e-7) for n in names]
    p, _ = fit_relative(predict, x0, [0.0] * len(names), [1.0] * len(names), meas, "measurements",
                        f"{part} seconds")
    fitted = make([v if v > 1e-12 else 0.0 for v in p])  # below a picosecond: nothing
    return dataclasses.replace(fitted, **{n: float(f"{getattr(fitted, n):.4g}") for n in names})


def _err(pred: HostPredictor, hp: HostParams, part: str, steps: list[HostStep]) -> float:
    memo: dict = {}
    return round(mape([pred.shape_part(hp, s, part, memo) for s in steps], [s.parts[part] for s in steps]), 2)
