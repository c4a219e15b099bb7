"""Host (CPU) work of one serving step, part by part, and how much of it the device step hides.

The engine's host work on each DP rank (rackplan/specs/ops.py HOST_PARTS, parameters in the
profile's `host:` block, rackplan.specs.HostParams):
  host.schedule  scheduler: fixed + per DP rank it schedules + per running sequence + per request
                 it admits this step (new request state, cache blocks, the prompt's bookkeeping) +
                 a speculative step's draft bookkeeping (a per-rank scheduler schedules its own
                 rank; a central one, HostParams.scheduler, every rank and sequence of the instance)
  host.prepare   input preparation: fixed + per sequence + per token the step runs + a speculative
                 step's difference (signed: a GPU engine builds the drafts' metadata, > 0; the CPU
                 executor measures < 0: its plain step's first torch call runs colder)
  host.launch    one CUDA-graph replay, or every kernel of every layer when eager
  host.dp_sync   DP coordination: the collective that lines the ranks up (per doubling of DP) and
                 the wait for the slowest rank (work x jitter x expected max of DP normal draws);
                 an idle rank runs a dummy step (the fixed parts only), so it never sets the max
  host.sample    sampling + rejection sampling per draft token (+ the accepted-count readback of a
                 speculative step)
  host.output    output processing: fixed + per sequence booked (its request's state) + per emitted
                 token + per request that finishes (its state and blocks freed) + a speculative
                 step's accepted-count bookkeeping (rank or instance, as the scheduler)
The API server (host.api_server) runs in its own processes beside the engine: it detokenises
every emitted token and sends one chunk per request per stream interval, shared by the API-server
processes of an endpoint (one endpoint per host the instance spans). It never delays the engine,
but a step cannot deliver tokens faster than it streams them: the decode step period is
max(engine step, API-server seconds per step). It also tokenises each new request's prompt, one
request at a time per process (prompt_seconds): a closed-loop client's next request reaches the
engine only after that (sim/simulator.py FrontEnd).

Two-stage pipeline. Synchronous scheduling runs host and device work one after the other; eager
launches interleave with the kernels they start, so the step is host - launches + max(gpu,
launches). Async scheduling prepares step n + 1 while the device runs step n: the step takes
serial + max(gpu, host - serial), where `serial` is what must wait for step n's device results
(the DP collective, which runs on the device stream, and a speculative step's readback). Exposed
host time = step - gpu: what does not fit under the device step, plus the serial part.
This is the only place host time is priced: the simulator, the planner's estimate and the
calibration replays take it from the step's StepCost. A step's admitted and finished requests
(Step.admitted / finished) come from the simulator's decode instances, and only where the host
block prices them (HostModel.turnover: the CPU executor's fitted block; every shipped profile
prices none); prefill, colocated and the planner's steady-state steps carry none.
"""
from __future__ import annotations

import math
from functools import partial
from statistics import NormalDist
from typing import NamedTuple

from rackplan.specs import HostParams, Layout
from rackplan.specs.ops import HOST_PARTS

PARTS_MEMO = 100_000  # remembered rank works' host parts per HostModel (as layer.RANK_MEMO)


class RankHost(NamedTuple):
    """What one rank's host work in a step depends on. (NamedTuples, as HostTime: built for every
    priced step, where a frozen dataclass costs several times more.)"""

    seqs: float  # sequences it runs: decode seats + prompt chunks
    tokens: float  # tokens through the model: 1 + drafts per decode sequence, prompt tokens
    emitted: float  # tokens it emits: acceptance length per decode sequence, one per prompt chunk
    drafts: float  # draft tokens it verifies
    admitted: float = 0.0  # requests it takes into its running set this step
    finished: float = 0.0  # requests whose last token this step emits


class HostTime(NamedTuple):
    """Host seconds of one step on its slowest rank, by part (HOST_PARTS order), and the pipeline."""

    parts: tuple[float, ...]
    serial: tuple[float, ...]  # the share of each part the device step cannot hide, even with async scheduling
    exposed_s: float  # step seconds beyond the device's
    api_s: float  # API-server seconds per step on the busiest endpoint (beside the engine)
    gpu_s: float = 0.0  # the device step it overlaps with
    overlap: bool = False  # async scheduling on hardware that overlaps host and device work

    def part(self, name: str) -> float:
        return self.parts[HOST_PARTS.index(name)]

    def step_with(self, names: tuple[str, ...]) -> float:
        """Step seconds counting only the host parts `names` (a measured step that ran only some of
        them, e.g. a benchmark step without a scheduler), through the same pipeline."""
        host = sum(p for n, p in zip(HOST_PARTS, self.parts) if n in names)
        serial = sum(p for n, p in zip(HOST_PARTS, self.serial) if n in names)
        launch = self.part("host.launch") if "host.launch" in names else 0.0
        return pipeline_seconds(self.gpu_s, host, launch, serial, self.overlap)

    @property
    def serial_s(self) -> float:
        return sum(self.serial)

    def as_dict(self) -> dict[str, float]:
        return dict(zip(HOST_PARTS, self.parts)) | {"host.api_server": self.api_s}

    @property
    def total_s(self) -> float:
        """All engine host work of the step (hidden or not)."""
        return sum(self.parts)


def schedule_seconds(hp: HostParams, w: RankHost, ranks: int) -> float:
    """Scheduler seconds of a step that schedules the work `w` over `ranks` DP ranks."""
    spec = hp.schedule_spec_s if w.drafts > 0 else 0.0
    return (hp.schedule_step_s + hp.schedule_per_rank_s * ranks + hp.schedule_per_seq_s * w.seqs
            + hp.schedule_per_admit_s * w.admitted + spec)


def intake_seconds(hp: HostParams, arrivals: int) -> float:
    """A prefill instance's host seconds for the requests it took in since its last step (routing and their
    headers: the CPU executor's prefill leader claims each arrival through the run's store, ~10 round trips,
    0.7-1.8 ms a request at 50-100% of a verified rate; RESULTS.md session 18, loop). The instance's next step
    waits for it (sim/prefill.py); 0 where the profile measured none."""
    return hp.schedule_per_arrival_s * arrivals


def rank_parts(hp: HostParams, w: RankHost) -> tuple[float, float, float, float]:
    """(schedule, prepare, sample, output) seconds of one rank's step."""
    schedule = schedule_seconds(hp, w, 1)
    prepare = (hp.prepare_step_s + hp.prepare_per_seq_s * w.seqs + hp.prepare_per_token_s * w.tokens
               + (hp.prepare_spec_s if w.drafts > 0 else 0.0))
    sample = hp.sample_step_s + hp.sample_per_seq_s * w.seqs + hp.sample_per_draft_s * w.drafts
    output = output_seconds(hp, w, 1)
    return schedule, prepare, sample, output


def central_parts(hp: HostParams, whole: RankHost, dp: int) -> tuple[float, float]:
    """(schedule, output) seconds of a central scheduler that schedules and books every one of
    the instance's `dp` ranks: the scheduler's fixed part once and per rank, each rank's output
    booking; per sequence / admitted request / emitted token / finished request of the instance."""
    return schedule_seconds(hp, whole, dp), output_seconds(hp, whole, dp)


def output_seconds(hp: HostParams, w: RankHost, ranks: int) -> float:
    """Output processing of a step that books the work `w` of `ranks` DP ranks."""
    spec = hp.output_spec_s if w.drafts > 0 else 0.0
    return (hp.output_step_s * ranks + hp.output_per_seq_s * w.seqs + hp.output_per_token_s * w.emitted
            + hp.output_per_finish_s * w.finished + spec)


def launch_seconds(hp: HostParams, num_layers: int, graphs: bool) -> float:
    """Launch time of a step: one graph replay, or every kernel of every layer."""
    return hp.graph_launch_s if graphs else hp.launch_s * hp.kernels_per_layer * num_layers


def dp_collective_seconds(hp: HostParams, dp: int) -> float:
    """The per-step DP coordination collective: latency per doubling of the ranks (0 for one rank)."""
    return hp.dp_sync_s * math.ceil(math.log2(dp)) if dp > 1 else 0.0


def expected_max_normal(n: int) -> float:
    """E[max of n standard normal draws] (Blom's approximation; 0 for n = 1)."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def pipeline_seconds(gpu_s: float, host_s: float, launch_s: float, serial_s: float, overlap: bool) -> float:
    """Step seconds of device work `gpu_s` and host work `host_s` (launches and the serial part
    included). overlap (async scheduling on hardware that can run host beside device work): a
    two-stage pipeline, serial + max(gpu, host - serial); else host - launches + max(gpu, launches)."""
    if overlap:
        return serial_s + max(gpu_s, host_s - serial_s)
    return host_s - launch_s + max(gpu_s, launch_s)


def endpoint_ranks(layout: Layout, gpus_per_node: int) -> int:
    """DP ranks one API endpoint serves: the instance's ranks on one host (vLLM runs an endpoint per
    host in hybrid load balancing), at least one."""
    return max(1, min(layout.dp, gpus_per_node // layout.tp))


def api_seconds(hp: HostParams, layout: Layout, gpus_per_node: int, dec_seqs: float, pre_seqs: float,
                acceptance: float) -> float:
    """API-server seconds per step of one endpoint whose ranks run `dec_seqs` decode and `pre_seqs`
    prompt sequences each (means over the ranks): detokenise every emitted token, send a chunk per
    request per stream interval (a request's first token goes out at once)."""
    ranks = endpoint_ranks(layout, gpus_per_node)
    return _api_seconds(hp, ranks, _api_servers(layout, ranks), acceptance, _chunk_share(layout, acceptance),
                        dec_seqs, pre_seqs)


def front_end_servers(layout: Layout, gpus_per_node: int) -> int:
    """API-server processes of one instance: one endpoint per host it spans, each with its
    processes (vLLM's default: one per DP rank the endpoint serves)."""
    ranks = endpoint_ranks(layout, gpus_per_node)
    return math.ceil(layout.dp / ranks) * _api_servers(layout, ranks)


def prompt_seconds(hp: HostParams, prompt_tokens: float) -> float:
    """API-server seconds to take in one new request: tokenise its prompt (one request at a time
    per process)."""
    return hp.api_per_prompt_token_s * prompt_tokens


def _api_servers(layout: Layout, ranks: int) -> int:
    return layout.api_servers or ranks  # vLLM's default: one process per DP rank it serves


def _chunk_share(layout: Layout, acceptance: float) -> float:
    """Chunks a decode sequence sends per step: one per stream interval's tokens, at most one."""
    return min(1.0, acceptance / layout.stream_interval)


def _api_seconds(hp: HostParams, ranks: int, servers: int, acceptance: float, chunk_share: float, dec_seqs: float,
                 pre_seqs: float) -> float:
    """api_seconds with the layout's constants worked out (HostModel keeps them bound)."""
    tokens = ranks * (dec_seqs * acceptance + pre_seqs)
    chunks = ranks * (dec_seqs * chunk_share + pre_seqs)
    return (tokens * hp.api_per_token_s + chunks * hp.api_per_chunk_s) / servers


class HostModel:
    """Host pricing of one layout: the per-layout constants, built once (StepModel holds one)."""

    def __init__(self, hp: HostParams, layout: Layout, num_layers: int, gpus_per_node: int, overlap_ok: bool = True):
        self.hp, self.layout, self.gpus_per_node = hp, layout, gpus_per_node
        sp = layout.speculation
        self.depth = sp.num_tokens if sp else 0
        self.acceptance = layout.tokens_per_step
        self.collective_s = dp_collective_seconds(hp, layout.dp)
        self.straggle = hp.dp_jitter * expected_max_normal(layout.dp)  # x the rank's host work
        self.spec_sync_s = hp.spec_sync_s if sp else 0.0
        self.launch = {g: launch_seconds(hp, num_layers, g) for g in (False, True)}
        self.overlap = layout.async_scheduling and overlap_ok
        ranks = endpoint_ranks(layout, gpus_per_node)
        self.api = partial(_api_seconds, hp, ranks, _api_servers(layout, ranks), self.acceptance,
                           _chunk_share(layout, self.acceptance))  # (dec_seqs, pre_seqs) -> api_seconds
        self._serial = (0.0, 0.0, 0.0, self.collective_s, self.spec_sync_s, 0.0)  # HostTime.serial (HOST_PARTS)
        self._serial_s = sum(self._serial)
        self._parts: dict[RankHost, tuple] = {}  # a rank's work -> rank_parts (prompt ranks repeat theirs)
        # whether a step's admitted and finished requests change its price (else callers leave them 0)
        self.turnover = hp.schedule_per_admit_s > 0 or hp.output_per_finish_s > 0

    def rank(self, dec_seqs: float, pre_seqs: float, pre_tokens: float, admitted: float = 0.0,
             finished: float = 0.0) -> RankHost:
        """One rank's step as the host parts see it (`admitted`, `finished`: requests that enter
        and leave its running set this step)."""
        return RankHost(dec_seqs + pre_seqs, dec_seqs * (1 + self.depth) + pre_tokens,
                        dec_seqs * self.acceptance + pre_seqs, dec_seqs * self.depth, admitted, finished)

    def time(self, ranks: list[RankHost], gpu_s: float, graphs: bool, api_s: float,
             instance: RankHost | None = None) -> HostTime:
        """HostTime of a step whose distinct rank works are `ranks` (and whose whole instance runs
        `instance`: a central scheduler's work) and device seconds `gpu_s`."""
        hp, memo = self.hp, self._parts
        if len(ranks) == 1:
            work = memo.get(ranks[0]) or self._rank_parts(ranks[0])
        else:
            work = max([memo.get(w) or self._rank_parts(w) for w in ranks], key=sum)
        schedule, prepare, sample, output = work  # the slowest rank's host work
        if hp.scheduler == "central" and instance is not None:  # every rank's fixed work + the instance's sequences
            schedule, output = central_parts(hp, instance, self.layout.dp)
        dp_sync = self.collective_s + self.straggle * (schedule + prepare + sample + output)
        sample += self.spec_sync_s
        launch = self.launch[graphs]
        parts = (schedule, prepare, launch, dp_sync, sample, output)
        step = pipeline_seconds(gpu_s, sum(parts), launch, self._serial_s, self.overlap)
        return HostTime(parts, self._serial, step - gpu_s, api_s, gpu_s, self.overlap)

    def _rank_parts(self, w: RankHost) -> tuple[float, float, float, float]:
        """rank_parts of `w`, remembered (cleared at PARTS_MEMO entries)."""
        if len(self._parts) >= PARTS_MEMO:
            self._parts.clear()
        hit = self._parts[w] = rank_parts(self.hp, w)
        return hit
