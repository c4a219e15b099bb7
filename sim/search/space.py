"""The search space: every instance shape the planner considers, before any pricing.

Prefill: TP 1-8 (one attention group, experts over the same GPUs) and DEPn (n = 1..32) with a
per-rank token budget. Decode: DEPn up to the whole NVLink domain and beyond it over the
scale-out network, and TP 1-8. Aggregated: the same shapes with a chunked-prefill budget.
Features per shape: MTP / draft depth, EPLB redundant experts, DBO, and for decode and aggregated
shapes the frontend (API-server processes and stream interval, sim/cost/host.py's API server: more
processes or a longer interval only pay where the API server bounds the step, and lose ties to
vLLM's defaults). CUDA graphs and async scheduling are on wherever the hardware overlaps host and
device work (host_features): sim/cost/host.py never prices a step without them faster, so those
variants are dominated and not enumerated. Batch sizes are swept by the estimator, not enumerated
here, because one step-cost table serves every batch of a shape.

Every proposed layout is one the plan's validation accepts at any GPU count: an EP size that does
not split the routed experts evenly gets the fewest redundant EPLB slots that do (vLLM's EPLB
requires experts + redundant to divide over the EP ranks; V4.1-Flash on DEP72: 384 + 48 = 432), or
is skipped when those slots would outnumber the experts or not fit in memory. A shape whose rank
cannot hold the workload's longest request in whole KV blocks is skipped too (`longest`: the
serving policy would never admit that prompt on a prefill rank, or that prompt and its output on a
decode or aggregated rank; the simulator refuses such a plan). `left_out` says which shapes were
skipped and why, for the report.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from rackplan.policy.kv import block_tokens, longest_admitted, window_tokens
from rackplan.specs import EPLBConfig, HardwareSpec, Layout, ModelSpec, SpecError, Speculation, Workload

from ..cost.host import endpoint_ranks
from ..cost.memory import kv_capacity_tokens

POW2 = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class SearchSpace:
    """Knobs of the enumeration (tuples so the space is hashable and prints in reports)."""

    prefill_tp: tuple[int, ...] = (1, 2, 4, 8)
    prefill_dep: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    prefill_budgets: tuple[int, ...] = (8192, 16384)  # tokens per DP rank per step
    decode_tp: tuple[int, ...] = (1, 2, 4, 8)
    decode_dep_max: int = 0  # 0: up to the GPU budget (beyond one NVLink domain when it allows)
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # max running seqs per rank
    agg_budgets: tuple[int, ...] = (2048, 8192)  # chunked-prefill budget per rank (incl. decode)
    spec_depths: tuple[int, ...] | None = None  # None: 0..model's draft depth
    acceptance_rate: float = 0.8  # probability each draft token is accepted (MTP on chat ~0.8-0.9)
    eplb: bool = True  # also try one redundant expert slot per EP rank
    dbo: tuple[bool, ...] = (False, True)
    # decode / aggregated frontends: (API-server processes per DP rank an endpoint serves, stream
    # interval in tokens); (1, 1) is vLLM's default (--api-server-count = local DP ranks, interval 1)
    frontends: tuple[tuple[int, int], ...] = ((1, 1), (4, 1), (1, 10))
    disaggregated: bool = True
    aggregated: bool = True


def acceptance_length(depth: int, rate: float) -> float:
    """Mean tokens emitted per step with `depth` drafts, each accepted w.p. `rate` until the first
    rejection: 1 + r + r^2 + ... + r^depth."""
    return sum(rate ** i for i in range(depth + 1))


def spec_options(model: ModelSpec, space: SearchSpace) -> tuple[Speculation | None, ...]:
    """Speculation settings to try: none, and each depth the model's drafter supports."""
    if model.draft is None:
        return (None,)
    if space.spec_depths is not None:
        depths = space.spec_depths
    elif model.draft.kind == "mtp":
        depths = tuple(range(model.draft.num_tokens + 1))
    else:
        depths = (0, model.draft.num_tokens)  # a block drafter proposes its whole block
    return tuple(None if d == 0 else Speculation(d, acceptance_length(d, space.acceptance_rate))
                 for d in sorted(set(depths)))


MAX_REDUNDANT_SHARE = 1.0  # redundant slots at most as many as the routed experts (each expert twice)


def required_redundant(model: ModelSpec, ep: int) -> int:
    """Fewest redundant expert slots that make experts + redundant divide over `ep` ranks."""
    return (-model.moe.num_experts) % ep


def _eplb_options(model: ModelSpec, ep: int, space: SearchSpace) -> tuple[EPLBConfig, ...]:
    """EPLB settings to try on `ep` ranks: none when the experts split evenly (and, with space.eplb
    from EP8 on, one redundant slot per rank as well); otherwise only the fewest redundant slots
    that split evenly (DeepSeek-V3 EP72: 256 + 32), unless they outnumber the experts (none)."""
    need = required_redundant(model, ep)
    if need:
        if need > MAX_REDUNDANT_SHARE * model.moe.num_experts:
            return ()
        return (EPLBConfig(redundant_experts=need, policy="hierarchical"),)
    opts = [EPLBConfig()]
    if space.eplb and ep >= 8:
        opts.append(EPLBConfig(redundant_experts=ep, policy="hierarchical"))
    return tuple(opts)


def _skip_reason(model: ModelSpec, hw: HardwareSpec, base: Layout, space: SearchSpace) -> tuple[str, str]:
    """(kind, text) of why a shape has no layout, or ("", "") when it has some. kind "balance": its
    EP size cannot be balanced; "memory": its weights (with the redundant experts it needs) leave
    no room for KV cache."""
    opts = _eplb_options(model, base.ep_size, space)
    if not opts:
        return "balance", (f"{base.role} {base.tag}: {model.moe.num_experts} experts would need "
                           f"{required_redundant(model, base.ep_size)} redundant slots to split over EP{base.ep_size} "
                           f"(more than {MAX_REDUNDANT_SHARE:.0%} of the experts)")
    if not any(fits(model, hw, replace(base, eplb=e)) for e in opts):
        return "memory", f"{base.role} {base.tag}"
    return "", ""


def _shapes(tps, deps, max_gpus: int) -> list[tuple[int, int]]:
    """(dp, tp) pairs within the budget, TP shapes first, deduplicated (TP1 == DEP1)."""
    out = [(1, t) for t in tps if t <= max_gpus]
    out += [(n, 1) for n in deps if n <= max_gpus and (n, 1) not in out]
    return out


def decode_deps(num_gpus: int, hw: HardwareSpec, space: SearchSpace) -> tuple[int, ...]:
    """DEP sizes for decode: powers of two up to the budget, plus the NVLink domain size itself."""
    cap = space.decode_dep_max or num_gpus
    sizes = {n for n in POW2 if n <= cap}
    if hw.domain_size <= cap:
        sizes.add(hw.domain_size)
    return tuple(sorted(sizes))


def host_features(hw: HardwareSpec) -> dict[str, bool]:
    """CUDA graphs and async scheduling where the hardware can overlap host and device work."""
    return {"cuda_graphs": hw.host_overlap, "async_scheduling": hw.host_overlap}


def fits(model: ModelSpec, hw: HardwareSpec, layout: Layout, tokens: int = 0) -> bool:
    """The memory filter: weights + reserve leave room for KV cache on each rank, and (tokens > 0) the
    rank admits a sequence of `tokens` tokens in whole KV blocks (rackplan/policy/kv.py)."""
    kv = kv_capacity_tokens(model, hw, layout)
    if kv < 1.0:
        return False
    block = block_tokens(model.attention.kind)
    return tokens <= 0 or longest_admitted(kv, block, layout.queries_per_step, window_tokens(model, block)) >= tokens


def longest(wl: Workload) -> tuple[int, int]:
    """(longest prompt, longest prompt + output) in tokens a layout must admit: each length's declared
    bound (fixed value, uniform high, the clip `max`), else the longest of the workload's own seeded
    requests (what `rackplan simulate` draws)."""
    bounds = [_bound(d) for d in (wl.isl, wl.osl)]
    if None in bounds:
        from ..workload import make_requests

        reqs = make_requests(wl)
        drawn = (int(max(reqs.isl)), int(max(reqs.osl)))
        bounds = [b if b is not None else d for b, d in zip(bounds, drawn)]
    return bounds[0], bounds[0] + bounds[1]


def _bound(dist) -> int | None:
    if dist.kind == "fixed":
        return int(dist.value)
    if dist.kind == "uniform":
        return int(dist.high if dist.max is None else min(dist.high, dist.max))
    return None if dist.max is None else int(dist.max)


def frontend_options(base: Layout, hw: HardwareSpec, space: SearchSpace) -> list[Layout]:
    """The shape with each frontend of the space: API-server processes per endpoint (None for
    vLLM's default, one per DP rank it serves) and the stream interval."""
    ranks = endpoint_ranks(base, hw.gpus_per_node)
    return [replace(base, api_servers=None if per_rank == 1 else per_rank * ranks, stream_interval=si)
            for per_rank, si in space.frontends]


def _variants(model: ModelSpec, base: Layout, space: SearchSpace, with_spec: bool,
              hw: HardwareSpec | None = None) -> list[Layout]:
    """Feature combinations of one shape: speculation x EPLB x DBO (x frontend, given `hw`)."""
    specs = spec_options(model, space) if with_spec else (None,)
    dbos = space.dbo if base.ep_size > 1 else (False,)
    fronts = frontend_options(base, hw, space) if hw is not None else [base]
    return [replace(f, speculation=s, eplb=e, dbo=d) for f in fronts
            for s in specs for e in _eplb_options(model, base.ep_size, space) for d in dbos]


def _prefill_bases(hw: HardwareSpec, num_gpus: int, space: SearchSpace) -> list[Layout]:
    return [Layout("prefill", dp=dp, tp=tp, max_tokens_per_step=budget, max_batch_per_rank=64, **host_features(hw))
            for dp, tp in _shapes(space.prefill_tp, space.prefill_dep, num_gpus - 1)
            for budget in space.prefill_budgets]


def _decode_bases(hw: HardwareSpec, num_gpus: int, space: SearchSpace) -> list[Layout]:
    return [Layout("decode", dp=dp, tp=tp, max_tokens_per_step=512, max_batch_per_rank=max(space.batches),
                   **host_features(hw))
            for dp, tp in _shapes(space.decode_tp, decode_deps(num_gpus - 1, hw, space), num_gpus - 1)]


def _aggregated_bases(hw: HardwareSpec, num_gpus: int, space: SearchSpace) -> list[Layout]:
    return [Layout("both", dp=dp, tp=tp, max_tokens_per_step=budget, max_batch_per_rank=max(space.batches),
                   **host_features(hw))
            for dp, tp in _shapes(space.decode_tp, decode_deps(num_gpus, hw, space), num_gpus)
            for budget in space.agg_budgets]


def prefill_layouts(model: ModelSpec, hw: HardwareSpec, num_gpus: int, space: SearchSpace,
                    need: tuple[int, int] = (0, 0)) -> list[Layout]:
    """Prefill instance shapes that fit in memory and admit the longest prompt, need[0] (EPLB only
    where the EP size needs it to split the experts evenly: prefill batches are large and even)."""
    out = []
    for base in _prefill_bases(hw, num_gpus, space):
        for eplb in _eplb_options(model, base.ep_size, space)[:1]:
            lay = replace(base, eplb=eplb)
            if fits(model, hw, lay, need[0]):
                out += [replace(lay, dbo=d) for d in (space.dbo if base.ep_size > 1 else (False,))]
    return out


def decode_layouts(model: ModelSpec, hw: HardwareSpec, num_gpus: int, space: SearchSpace,
                   need: tuple[int, int] = (0, 0)) -> list[Layout]:
    """Decode instance shapes that admit the longest prompt + output, need[1] (batch left at the
    largest; the estimator sweeps it)."""
    out = []
    for base in _decode_bases(hw, num_gpus, space):
        out += [v for v in _variants(model, base, space, True, hw) if fits(model, hw, v, need[1])]
    return out


def aggregated_layouts(model: ModelSpec, hw: HardwareSpec, num_gpus: int, space: SearchSpace,
                       need: tuple[int, int] = (0, 0)) -> list[Layout]:
    """Aggregated (prefill + decode on the same instance) shapes with a chunked-prefill budget that
    admit the longest prompt + output, need[1]."""
    out = []
    for base in _aggregated_bases(hw, num_gpus, space):
        out += [v for v in _variants(model, base, space, True, hw) if fits(model, hw, v, need[1])]
    return out


def left_out(model: ModelSpec, hw: HardwareSpec, num_gpus: int, space: SearchSpace,
             need: tuple[int, int] = (0, 0)) -> list[str]:
    """For the report: the shapes considered and skipped, with the reason, and the EP sizes that
    only run with redundant EPLB slots."""
    bases = []
    if space.disaggregated and num_gpus >= 2:
        bases += _prefill_bases(hw, num_gpus, space) + _decode_bases(hw, num_gpus, space)
    if space.aggregated:
        bases += _aggregated_bases(hw, num_gpus, space)
    reasons = [_skip_reason(model, hw, b, space) for b in bases]
    small = list(dict.fromkeys(t for k, t in reasons if k == "memory"))
    out = list(dict.fromkeys(t for k, t in reasons if k == "balance"))
    if small:
        out.append(f"too small for the weights with room for KV cache on {hw.name}: {', '.join(small)}")
    short = list(dict.fromkeys(f"{b.role} {b.tag}" for b, (k, _) in zip(bases, reasons)
                               if not k and not _admits_longest(model, hw, b, space, need)))
    if short:
        out.append(f"KV per rank too small for the workload's longest request (prompt {need[0]:,} tokens; "
                   f"prompt + output {need[1]:,} on decode and aggregated ranks) on {hw.name}, whole KV blocks: "
                   f"{', '.join(short)}")
    need = sorted({b.ep_size for b in bases if required_redundant(model, b.ep_size) and _eplb_options(
        model, b.ep_size, space)})
    out += [f"EP{ep} splits {model.moe.num_experts} experts unevenly: only with "
            f"{required_redundant(model, ep)} redundant EPLB slots ({model.moe.num_experts} + "
            f"{required_redundant(model, ep)} over {ep} ranks)" for ep in need]
    return out


def _admits_longest(model: ModelSpec, hw: HardwareSpec, base: Layout, space: SearchSpace,
                    need: tuple[int, int]) -> bool:
    tokens = need[0] if base.role == "prefill" else need[1]
    return any(fits(model, hw, replace(base, eplb=e), tokens) for e in _eplb_options(model, base.ep_size, space))


def min_gpus_for_weights(model: ModelSpec, hw: HardwareSpec, limit: int = 1024) -> tuple[int, str]:
    """Fewest GPUs of one instance that hold the weights (and its shape), for the budget error."""
    for n in POW2:
        if n > limit:
            break
        for lay in (Layout("decode", dp=n), Layout("decode", dp=1, tp=n)):
            if fits(model, hw, lay):
                return n, lay.tag
    return 0, ""


def check_budget(model: ModelSpec, hw: HardwareSpec, num_gpus: int, disaggregated_only: bool) -> None:
    """SpecError when `num_gpus` cannot hold the weights (twice over for prefill + decode)."""
    need, tag = min_gpus_for_weights(model, hw)
    if need == 0:
        raise SpecError("", "gpus", f"a hardware whose GPUs can hold {model.name} (none up to 1024 do on "
                        f"{hw.name})", num_gpus)
    least = 2 * need if disaggregated_only else need
    if num_gpus < least:
        what = "one prefill and one decode instance" if disaggregated_only else "one instance"
        raise SpecError("", "gpus", f"at least {least} GPUs: {model.name} weights need {need} x {hw.name} "
                        f"per instance (smallest fitting layout {tag}) and a plan needs {what}", num_gpus)
