"""Profile: efficiency factors and overheads that turn datasheet peaks into predicted seconds.

Datasheet defaults live in `configs/profiles/datasheet.yaml`; `rackplan calibrate` writes fitted
profiles with provenance and fit error. Every field has a default so planning works uncalibrated.
Measured profiles (`rackplan calibrate --op-database`) add `curves`: efficiency over shape per op
class, read only by `sim/cost/efficiency.py`; op classes without a curve use the scalar fields and
say so in `fallbacks`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from .fields import SpecError, check, non_negative, positive


@dataclass(frozen=True)
class A2AParams:
    """All-to-all latency model for one (kernel, link) and optionally one EP size:
    seconds = alpha_s + bytes_on_link / (link_bw * bw_eff)."""

    kernel: Literal["low_latency", "high_throughput"]
    link: Literal["nvlink", "scaleout"]
    alpha_s: float
    bw_eff: float
    ep: Optional[int] = None  # None: any EP size
    phase: Literal["dispatch", "combine", "both"] = "both"
    floor_s: float = 0.0  # latency floor: small batches sit flat at the kernel's minimum

    def __post_init__(self):
        non_negative(self.alpha_s, "alpha_s")
        non_negative(self.floor_s, "floor_s")
        check(0 < self.bw_eff <= 1.5, "bw_eff", "a fraction of the link bandwidth in (0, 1.5]", self.bw_eff)


# The highest eff_max of a curve bounded to a regime of work: a streaming op's working set that fits the
# L2 cache is served faster than the HBM peak its efficiency is a fraction of (H100: several times HBM
# bandwidth from L2, Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023)
REGIME_EFF_MAX = 2.0
# fit_error keys a `calibrate --vllm-bench` fit adds: |simulated / measured - 1| % per latency percentile of
# the bench (vllm.ttft_p50, ...), beside the op classes' MAPE (calibration/command.py)
BENCH_ERROR_PREFIX = "vllm."
# step kinds a profile's step-time spread is given for: a step that runs prompt tokens, a decode-only step
STEP_KINDS = ("prefill", "decode")


@dataclass(frozen=True)
class Curve:
    """Efficiency of one op class over shape: the fraction of a peak (FLOP/s, HBM or link B/s) it
    reaches, saturating in a shape measure x and in the work of one kernel:

        eff = eff_max * occ / ((pad^q + (x_half/x)^q + (y_half/y + z_half/z)^q)^(1/q) + work_half/work + row/(y z))
        row = row_half + chunk_half * ceil(z/z_chunk)  (chunk_half 0 without a z_chunk)
        occ = tiles / (tiles + tiles_half),  tiles = ceil(x/128) * ceil(y/128)
        pad = (x_pad + pad_cost * (x_pad - x)) / x,  x_pad = ceil(x/x_tile) * x_tile  (1 without x_tile)
        pad = 1 + pad_cost * (work_pad - 1)  under a tile_rule, work_pad its padded work over m and n

    for x_min < x <= x_max, y_min < y <= y_max, z_min <= z < z_max and load_min < load <= load_max (a zero
    bound is open; an unknown y, z or load, 0, lies in every range; load: rows per local expert as a MoE kernel's
    tile heuristic averages them, every token entering the rank times top-k over the rank's experts, FlashInfer's
    avg_tokens_per_expert); outside them the curve does not run (efficiency 0), so the curves of one op
    class can be a kernel dispatch's configurations by x, y, z and load (vLLM's FP8 GEMM picks its tile by m,
    on SM90 by n too, on SM100 by k at m = 64; FlashInfer's MoE its tile_N by load: calibration/opdb_ops.py
    names the thresholds), each padding its x to its
    own tile edge x_tile (rows a tile computes whether or not they are there); pad_cost is what a padded
    row costs beyond a real one, in real rows (0: the same; fitted, calibration/opdb.md says why).
    A curve with a tile_rule (a weight GEMM's; sim/cost/deepgemm.py) takes its pad term from the tiles the rule
    picks for (x, y, z) = (m, n, k) on the GPU's SM count, and with a rule_group it runs only for the shapes the
    rule puts in that configuration group (DeepGEMM's SM90 block-FP8 GEMM: one CTA, a one-wave big tile, a
    2-CTA cluster); an unknown n or k (0) is in no group. Pricing such a curve needs the SM count
    (efficiency.gemm's `sms`): without it, an error.

    What x, y, z and work are depends on the op class (sim/cost/efficiency.py says which: e.g. a
    weight GEMM has x = rows m, y = n, z = k, work = FLOPs). Each half-term adds the time that
    shape costs beyond the peak rate (a GEMM's weight reads at small m, its activation traffic at
    small n or k, a kernel's fixed latency at small work); q blends the x and y/z terms between a
    sum (q = 1) and a max (q large). A zero half (or an unknown shape, 0) drops its term.
    The row term is work done per row of x whatever y, in FLOP units of the same peak (a weight GEMM:
    x seconds = 2 x row / (peak eff_max occ)): row_half per row, and chunk_half per row for every z_chunk of z
    it loops over (vLLM's per-tensor FP8 linear, whose tables hold a per-row cost stepping every 2048 of k:
    calibration/opdb_ops.py FP8_ROW_CHUNK); 0 (the default) leaves the curve as it was.
    """

    eff_max: float
    x_half: float = 0.0
    y_half: float = 0.0
    z_half: float = 0.0
    work_half: float = 0.0
    sharpness: float = 1.0  # q
    tiles_half: float = 0.0
    x_tile: float = 0.0  # tile edge along x the compute term pads x to (0: no padding)
    pad_cost: float = 0.0  # extra cost of one padded row of x_tile, in real rows (0: as a real row)
    x_min: float = 0.0  # the curve runs for x_min < x <= x_max (0: unbounded; a dispatch by x, e.g. GEMM rows)
    x_max: float = 0.0
    y_min: float = 0.0  # ... and for y_min < y <= y_max (0: unbounded; a dispatch by y, e.g. SM90 FP8 tiles by n)
    y_max: float = 0.0
    work_min: float = 0.0  # ... and for work_min <= work < work_max (0: no upper bound; a dispatch by work,
    work_max: float = 0.0  # e.g. all-reduce message size, or a working set in or out of L2)
    load_min: float = 0.0  # ... and for load_min < load <= load_max (0: unbounded; a dispatch by the MoE kernel's
    load_max: float = 0.0  # average rows per local expert, e.g. FlashInfer's tile_N: calibration/opdb_ops.py)
    z_min: float = 0.0  # ... and for z_min <= z < z_max (0: unbounded; a dispatch by z, e.g. SM100 FP8 tiles by k,
    z_max: float = 0.0  # `k < 4096`: calibration/opdb_ops.py FP8_DISPATCH)
    # a tile rule (sim/cost/deepgemm.py TILE_RULES, e.g. "deepgemm_sm90": the configuration DeepGEMM's SM90
    # fp8_gemm_nt picks per (m, n, k) on the GPU's SMs; "": none): its padded work is the pad term
    tile_rule: str = ""
    rule_group: int = 0  # ... and the curve prices only the shapes the rule puts in this group (0: every group)
    # work per row of x whatever y, in FLOPs at the curve's peak: fixed, and per z_chunk of z (0: none; above)
    row_half: float = 0.0
    chunk_half: float = 0.0
    z_chunk: float = 0.0  # the z a step of chunk_half covers (0: none; needs chunk_half, and chunk_half needs it)

    def __post_init__(self):
        cap = REGIME_EFF_MAX if self.work_min or self.work_max else 1.0
        check(0 < self.eff_max <= cap, "eff_max", f"a fraction in (0, {cap:g}]", self.eff_max)
        for name in ("x_half", "y_half", "z_half", "work_half", "tiles_half", "x_tile", "pad_cost", "x_min", "x_max",
                     "y_min", "y_max", "work_min", "work_max", "load_min", "load_max", "z_min", "z_max", "row_half",
                     "chunk_half", "z_chunk"):
            non_negative(getattr(self, name), name)
        check(0.5 <= self.sharpness <= 20.0, "sharpness", "a blend exponent in [0.5, 20]", self.sharpness)
        check(not self.x_max or self.x_max > self.x_min, "x_max", f"above x_min ({self.x_min}) or 0", self.x_max)
        check(not self.y_max or self.y_max > self.y_min, "y_max", f"above y_min ({self.y_min}) or 0", self.y_max)
        check(not self.work_max or self.work_max > self.work_min, "work_max",
              f"0 (no bound) or above work_min ({self.work_min:g})", self.work_max)
        check(not self.load_max or self.load_max > self.load_min, "load_max", f"above load_min ({self.load_min}) or 0",
              self.load_max)
        check(not self.z_max or self.z_max > self.z_min, "z_max", f"above z_min ({self.z_min}) or 0", self.z_max)
        check(bool(self.z_chunk) == bool(self.chunk_half), "z_chunk",
              f"> 0 exactly where chunk_half is (chunk_half {self.chunk_half:g}: a step with no width, or a width with "
              "no step, prices nothing)", self.z_chunk)
        self._check_rule()

    def _check_rule(self) -> None:
        """tile_rule names a rule of sim/cost/deepgemm.py (or is ""), rule_group one of its groups (or 0)."""
        if not self.tile_rule:
            check(not self.rule_group, "rule_group", "0 without a tile_rule", self.rule_group)
            return
        from rackplan.sim.cost.deepgemm import GROUPS, TILE_RULES  # (lazily: the rules live with the cost model)

        check(self.tile_rule in TILE_RULES, "tile_rule", f"one of {', '.join(sorted(TILE_RULES))} or \"\"",
              self.tile_rule)
        check(self.rule_group in (0,) + GROUPS, "rule_group", f"0 (every group) or one of {GROUPS}", self.rule_group)
        check(not self.x_tile, "x_tile", "0 with a tile_rule (the rule's padded work is the pad term)", self.x_tile)


@dataclass(frozen=True)
class HostParams:
    """Host (CPU) work of one engine step on one DP rank, part by part: the profile's `host:` block.

    sim/cost/host.py prices each part as a function of the step (sequences, tokens, emitted tokens,
    draft tokens, DP size); the part names are rackplan/specs/ops.py's host.* ops, the executor times
    them by those names and `rackplan calibrate` fits them. Seconds unless said. The class defaults
    are the datasheet's (configs/profiles/datasheet.yaml gives their sources)."""

    # where the scheduler and output processing run: per DP rank (vLLM: an engine core per rank, each
    # scheduling its own sequences) or once for the whole instance (the CPU executor's leader rank
    # schedules and books every rank's sequences): their per-sequence costs count those sequences
    scheduler: Literal["per_rank", "central"] = "per_rank"
    schedule_step_s: float = 100e-6  # scheduler: fixed per step
    schedule_per_rank_s: float = 0.0  # ... per DP rank it schedules (1 per rank; central: the instance's DP)
    schedule_per_seq_s: float = 10e-6  # scheduler: per running sequence (decode seat or prompt chunk)
    # the next three: 0 where they were not measured (the datasheet's and the GPU profiles' blocks)
    schedule_per_admit_s: float = 0.0  # ... per request admitted this step (a new running sequence)
    # a prefill instance's intake: per request it takes in (routing it and reading its header; the CPU
    # executor's prefill leader does it through the run's store before its next step)
    schedule_per_arrival_s: float = 0.0
    schedule_spec_s: float = 0.0  # ... per speculative decode step (draft-token bookkeeping)
    prepare_step_s: float = 100e-6  # input preparation (positions, block tables, metadata): per step
    prepare_per_seq_s: float = 10e-6  # ... per sequence
    prepare_per_token_s: float = 0.0  # ... per token the step runs (prompt tokens, 1 + drafts per seq)
    # ... a speculative decode step's difference from a plain one, signed (0 where not measured):
    # the code path before the inputs differs (the CPU executor measures < 0, sim/cost/host.py)
    prepare_spec_s: float = 0.0
    launch_s: float = 4e-6  # one kernel launch without CUDA graphs
    kernels_per_layer: int = 24  # kernel launches per layer of a step
    graph_launch_s: float = 50e-6  # one CUDA-graph replay
    dp_sync_s: float = 50e-6  # DP coordination collective, per doubling of the DP ranks
    dp_jitter: float = 0.0  # coefficient of variation of one rank's host work (the slowest rank sets the step)
    sample_step_s: float = 50e-6  # sampling (host side: metadata, sampled-id readback): per step
    sample_per_seq_s: float = 2e-6  # ... per sequence
    sample_per_draft_s: float = 1e-6  # rejection sampling, per draft token verified
    # a speculative step's host work that waits for its device result, per step (GPU: accepted counts
    # read back before the next step's inputs; the CPU executor: its rejection sampler's fixed cost)
    spec_sync_s: float = 300e-6
    output_step_s: float = 50e-6  # output processing in the engine: per step
    output_per_token_s: float = 12e-6  # ... per emitted token
    output_per_seq_s: float = 0.0  # ... per running sequence (its request's state; 0 where not measured)
    output_per_finish_s: float = 0.0  # ... per request finished this step (0 where not measured)
    output_spec_s: float = 0.0  # ... per speculative decode step (accepted counts; 0 where not measured)
    api_per_token_s: float = 15e-6  # API server (its own processes): detokenise one emitted token
    api_per_chunk_s: float = 10e-6  # ... send one streamed chunk (one request's tokens of a stream interval)
    # ... tokenise one prompt token of a new request, one request at a time per API-server process
    # (the front end a closed-loop client's next request passes before the engine sees it)
    api_per_prompt_token_s: float = 0.78e-6

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if f.name not in ("kernels_per_layer", "scheduler", "prepare_spec_s"):
                non_negative(getattr(self, f.name), f.name)
        check(self.prepare_step_s + self.prepare_spec_s >= 0, "prepare_spec_s",
              "a difference that keeps a speculative step's fixed part >= 0 (>= -prepare_step_s)", self.prepare_spec_s)
        positive(self.kernels_per_layer, "kernels_per_layer")

    def scaled(self, parts: tuple[str, ...], factor: float) -> "HostParams":
        """These params with every seconds field of the named parts (host.* op names, HOST_FIELDS)
        multiplied by `factor`: what-if studies change one part at a time, or all of them."""
        prefixes = tuple(p for part in parts for p in HOST_FIELDS[part])
        names = [f.name for f in dataclasses.fields(self) if f.name.endswith("_s") and f.name.startswith(prefixes)]
        return dataclasses.replace(self, **{n: getattr(self, n) * factor for n in names})


# which HostParams fields (by name prefix) price each host part (rackplan/specs/ops.py host.* ops)
HOST_FIELDS: dict[str, tuple[str, ...]] = {
    "host.schedule": ("schedule_",),
    "host.prepare": ("prepare_",),
    "host.launch": ("launch_", "graph_launch_"),
    "host.dp_sync": ("dp_sync_",),
    "host.sample": ("sample_", "spec_sync_"),
    "host.output": ("output_",),
    "host.api_server": ("api_",),
}


@dataclass(frozen=True)
class Profile:
    """Efficiencies (fractions of peak) and fixed costs (seconds) for one hardware + stack."""

    name: str
    hardware: str = "*"  # which hardware it was fitted on ("*" = generic datasheet defaults)
    gemm_eff_max: float = 0.70  # large-GEMM fraction of peak FLOP/s
    gemm_m_half: float = 32.0  # tokens (rows) at which GEMM efficiency is half of max
    attn_eff: float = 0.50  # attention kernels, fraction of peak FLOP/s
    mem_eff: float = 0.80  # large streaming reads, fraction of HBM bandwidth
    mem_bytes_half: float = 1.0e6  # bytes per kernel at which bandwidth efficiency halves
    op_fixed_s: float = 2.0e-6  # per-kernel device-side fixed time
    a2a: tuple[A2AParams, ...] = ()
    kv_transfer_alpha_s: float = 1.0e-3  # per-request handshake of the KV connector
    kv_transfer_bw_eff: float = 0.7
    host: HostParams = field(default_factory=HostParams)  # host (CPU) work per step, by part
    # a prefill instance's host work where its loop differs (the CPU executor's prefill loop claims
    # requests from a store and sends KV); None: `host`, as vLLM runs one engine loop for both roles
    host_prefill: Optional[HostParams] = None
    # fraction of the overlap the two-micro-batch pipeline allows that DBO realises (sim/cost/dbo.py:
    # 1 = the ideal schedule, 0 = the micro-batches run back to back)
    dbo_efficiency: float = 0.9
    # device idle between two kernels launched eagerly (no CUDA graph) even when the host keeps
    # ahead: launch latency the graph replay removes (typical figure; calibration fits it)
    eager_kernel_gap_s: float = 2.0e-6
    op_scale: dict[str, float] = field(default_factory=dict)  # fitted per-op correction factors
    # fitted per-op fixed seconds per layer the op runs in (host dispatch of its kernels on CPU,
    # launch-bound ops): added after op_scale, on ranks where the op has work. Keys of both tables
    # are op names ("attn.core") or op/phase ("attn.core/prefill"), the latter winning
    op_fixed: dict[str, float] = field(default_factory=dict)
    # efficiency curves per op class ("gemm.fp8", "experts.fp4", "attn.prefill.mla.bf16", "allreduce.tp4",
    # "quantize.fp8", "mhc.pre"), fitted from measured per-op tables; see sim/cost/efficiency.py. A class
    # may list several curves (kernel configurations, e.g. small-M and large-M tiles): the engine runs
    # the faster, so the class's efficiency is their maximum
    curves: dict[str, tuple[Curve, ...]] = field(default_factory=dict)
    # op class -> where it comes from when this profile has no curve for it: another curve's key
    # (efficiency.py then uses that curve) or a description of the source (datasheet scalars, a table)
    fallbacks: dict[str, str] = field(default_factory=dict)
    # step-time variance, from measurement (`rackplan calibrate --measurements` writes it, provenance under
    # `step_time_spread`): per step kind (prefill: a step with prompt tokens; decode), the log-normal sd of a
    # measured step's time about its price, and the lag-1 correlation of consecutive steps' log deviations
    # (a shared machine's slowdowns last several steps). The simulator draws each step as price x exp(x),
    # x an AR(1) series with that sd and correlation (sim/step_spread.py). Empty (the shipped profiles: the
    # public op tables are means, no step-level spread is published): every step at its price.
    step_time_spread: dict[str, float] = field(default_factory=dict)
    step_time_corr: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    fit_error: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("gemm_eff_max", "attn_eff", "mem_eff", "kv_transfer_bw_eff"):
            v = getattr(self, name)
            check(0 < v <= 1.0, name, "a fraction in (0, 1]", v)
        for name in ("gemm_m_half", "mem_bytes_half", "op_fixed_s", "kv_transfer_alpha_s", "eager_kernel_gap_s"):
            non_negative(getattr(self, name), name)
        check(0 <= self.dbo_efficiency <= 1, "dbo_efficiency", "a fraction in [0, 1]", self.dbo_efficiency)
        for name, v in self.op_scale.items():
            check(v > 0, f"op_scale.{name}", "a positive factor", v)
        for name, v in self.op_fixed.items():
            non_negative(v, f"op_fixed.{name}")
        for name, v in self.fit_error.items():
            non_negative(v, f"fit_error.{name}")
        for name, cs in self.curves.items():
            check(len(cs) > 0, f"curves.{name}", "at least one curve")
        for table, lo, hi in (("step_time_spread", 0.0, 2.0), ("step_time_corr", 0.0, 0.99)):
            for kind, v in getattr(self, table).items():
                check(kind in STEP_KINDS, f"{table}.{kind}", f"a step kind, one of {', '.join(STEP_KINDS)}", kind)
                check(lo <= v <= hi, f"{table}.{kind}", f"a number in [{lo:g}, {hi:g}]", v)

    def host_for(self, role: str) -> HostParams:
        """The host block that prices steps of an instance of `role` (prefill, decode, both)."""
        return self.host_prefill if role == "prefill" and self.host_prefill is not None else self.host

    def with_host(self, fn) -> "Profile":
        """This profile with `fn` (HostParams -> HostParams) applied to every host block."""
        pre = fn(self.host_prefill) if self.host_prefill is not None else None
        return dataclasses.replace(self, host=fn(self.host), host_prefill=pre)

    def describe(self) -> str:
        """One line: where the numbers come from (measured tables, fitted measurements, datasheet)
        and the fit error (MAPE %, held out where the fit held rows out) over its op classes."""
        src = self.provenance.get("source") or {}
        err = ""
        ops = sorted(v for k, v in self.fit_error.items() if not k.startswith(BENCH_ERROR_PREFIX))
        bench = sorted(v for k, v in self.fit_error.items() if k.startswith(BENCH_ERROR_PREFIX))
        if ops:
            kind = "held-out MAPE" if src.get("package") else "MAPE"
            err = f"; fit error ({kind}) {ops[0]:.1f}-{ops[-1]:.1f}% over {len(ops)} op classes"
        if bench:  # a vllm bench fit's |simulated / measured - 1| per latency percentile, not an op class's MAPE
            err += f"; vllm bench error {bench[0]:.1f}-{bench[-1]:.1f}% over {len(bench)} latency percentiles"
        if src.get("package"):
            return (f"measured: {src['package']} {src.get('version', '')} per-op tables of {src.get('system')}/"
                    f"{src.get('framework')}{err}")
        if self.hardware == "*":
            return "typical datasheet efficiencies, not measured"
        return f"fitted by rackplan calibrate on {self.hardware}{err}"

    def a2a_params(self, kernel: str, link: str, ep: int, phase: str) -> A2AParams:
        """Best-matching all-to-all entry: same kernel and link, phase-specific before 'both',
        nearest EP size (log distance) before an EP-agnostic entry."""
        import math

        cands = [p for p in self.a2a if p.kernel == kernel and p.link == link
                 and p.phase in (phase, "both")]
        if not cands:
            raise SpecError(f"profile {self.name}", "a2a", f"an entry for kernel {kernel} over link {link}")

        def rank(p):
            ep_dist = abs(math.log(p.ep) - math.log(ep)) if p.ep else 50.0
            return (ep_dist, 0 if p.phase == phase else 1)

        return min(cands, key=rank)


def check_hardware(prof: Profile, hardware: str, any_hardware: bool = False, where: str = "") -> None:
    """A profile fitted on one hardware must not price another (its curves are that GPU's):
    SpecError naming both, unless the profile is generic ("*") or `any_hardware` is set."""
    if prof.hardware in ("*", hardware) or any_hardware:
        return
    raise SpecError(where or f"profile {prof.name}", "hardware",
                    f"{hardware}, the hardware it prices (or pass --profile-any-hardware)", prof.hardware)
