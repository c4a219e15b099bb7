"""Steady-state analytic estimate of one instance shape: what it sustains and how fast it answers.

Prefill instance: a full step carries `budget` new tokens per DP rank; its capacity is requests/s
at full steps, and its p90 TTFT at utilisation rho is the service time plus an M/M/1 waiting
tail halved for near-deterministic service (Kingman: waits scale with (1 + cs^2) / 2).
Decode instance: a step at batch b per rank costs t(b) (from the step cost model at the mean
context isl + osl/2); it emits b x acceptance tokens per rank, so it sustains
dp * b * acc / (osl * t(b)) requests/s at TPOT t(b) / acc. A table over the batch grid lets the
combiner find the operating batch at any rate by interpolation.
Aggregated instance: each step carries b decode sequences plus a prefill chunk; the chunk that
keeps up with completions is b * acc * new / osl tokens.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from functools import cached_property

from rackplan.policy.kv import block_tokens, window_tokens
from rackplan.specs import HardwareSpec, Layout, ModelSpec, Profile, SpecError, Workload

from ..cost.memory import kv_capacity_tokens
from ..cost.step import CostContext, RankWork, StepCost, host_only, price_key
from ..cost.transfer import KVLink, kv_link
from ..expert_load import routing_load
from ..pricer import StepPricer
from ..request_classes import mean_lengths

WAIT_TAIL = math.log(10.0)  # p90 of an exponential wait, in units of its mean
DETERMINISTIC = 0.5  # (1 + cs^2) / 2 with cs ~ 0: Kingman's correction for fixed service times
RHO_MAX = 0.95  # never plan a pool hotter than this


@dataclass(frozen=True)
class Traffic:
    """Mean request shape the estimate works with (tokens)."""

    isl: float
    osl: float
    cached: float  # prompt tokens served from the prefix cache
    skew: float = 0.0  # routing load: a power-law exponent, or an ExpertLoad from data (sim/expert_load.py)

    @property
    def new(self) -> float:
        return max(self.isl - self.cached, 1.0)

    @property
    def ctx_mean(self) -> float:
        """Mean context of a decoding sequence."""
        return self.isl + self.osl / 2.0

    @property
    def ctx_max(self) -> float:
        return self.isl + self.osl


def traffic_of(workload: Workload, model: ModelSpec | None = None) -> Traffic:
    """Mean ISL / OSL / cached tokens of a workload and the routing load it prices `model` with
    (sim/expert_load.py; without a model, only the lengths are meant: the routing_skew is kept).
    Trace-length workloads are not planned yet."""
    try:
        isl, osl = mean_lengths(workload)
    except ValueError:
        raise SpecError(workload.name, "isl", "fixed, uniform or lognormal lengths for planning "
                        "(trace lengths: give the planner a workload with their mean)") from None
    skew = workload.routing_skew if model is None else routing_load(workload, model)
    return Traffic(isl, osl, isl * workload.prefix_hit_rate, skew)


class Pricer:
    """Exact step costs of one (model, hardware, profile) for the planner: the simulator's step
    pricer (sim/pricer.py) of each layout, so both price a step the same way. Rates and latencies
    use StepCost.period_s (the step plus the engine loop around it), as the simulator does. `ops`:
    whether step costs carry their op breakdown (the pricing stage reads periods only)."""

    def __init__(self, model: ModelSpec, hw: HardwareSpec, prof: Profile, skew: float = 0.0, ops: bool = True,
                 link: KVLink | None = None):
        self.model, self.hw, self.prof, self.skew, self.ops = model, hw, prof, skew, ops
        self.link = link  # the KV link between two hardware kinds (sim/search/pairs.py); None: NVLink or the NIC
        self._pricers: dict[Layout, StepPricer] = {}
        self._links: dict[bool, KVLink] = {}

    def cx(self, layout: Layout) -> CostContext:
        return CostContext(self.model, self.hw, layout, self.prof, self.skew)

    def pricer(self, layout: Layout) -> StepPricer:
        """The step pricer of a layout (sim/pricer.py, as the simulator prices its steps). Replicas and
        batch and token caps do not change a step's price (price_key), nor does the role unless the
        profile gives prefill instances their own host block, so decode and aggregated variants of a
        shape share it."""
        own = layout.role == "prefill" and self.prof.host_prefill is not None
        key = price_key(replace(layout, role="prefill" if own else "decode"))
        hit = self._pricers.get(key)
        if hit is None:
            engine = host_only(key)  # host-setting variants of a shape share its device pricing
            if engine != key:
                model = self.pricer(engine).model.variant(key)
                hit = self._pricers[key] = StepPricer(self.cx(key), model=model, ops=self.ops)
            else:
                hit = self._pricers[key] = StepPricer(self.cx(key), ops=self.ops)
        return hit

    def transfer_s(self, context_tokens: float, same_domain: bool) -> float:
        """KV transfer seconds of one sequence (sim/cost/transfer.py)."""
        if self.link is not None:
            return self.link.seconds(context_tokens)
        link = self._links.get(same_domain)
        if link is None:
            link = self._links[same_domain] = kv_link(self.model, self.hw, self.prof, same_domain)
        return link.seconds(context_tokens)

    def decode(self, layout: Layout, batch: float, ctx_mean: float) -> StepCost:
        """A decode step of `batch` sequences per rank at mean context `ctx_mean`."""
        return self.pricer(layout).uniform(RankWork(float(batch), float(batch * ctx_mean)))

    def prefill(self, layout: Layout, chunks: tuple[float, ...], prefix: float) -> StepCost:
        """A prefill step with `chunks` (new tokens each) after `prefix` cached tokens on every rank."""
        groups: dict[float, int] = {}
        for n in chunks:
            groups[float(n)] = groups.get(float(n), 0) + 1
        work = RankWork(0.0, 0.0, tuple((c, n, float(prefix)) for n, c in groups.items()))
        return self.pricer(layout).uniform(work)

    def mixed(self, layout: Layout, batch: float, ctx_mean: float, chunk: float, prefix: float) -> StepCost:
        """A decode step of `batch` sequences per rank plus one prefill chunk per rank."""
        work = RankWork(float(batch), float(batch * ctx_mean), ((1, float(chunk), float(prefix)),))
        return self.pricer(layout).uniform(work)


def queue_wait_p90(rho: float, capacity_rps: float) -> float:
    """p90 queueing delay (s) of a pool at utilisation `rho` with capacity `capacity_rps`."""
    if rho <= 0.1:
        return 0.0
    if rho >= 1.0:
        return math.inf
    return DETERMINISTIC * math.log(10.0 * rho) / (capacity_rps * (1.0 - rho))


@dataclass(frozen=True)
class PrefillUnit:
    """One prefill instance shape, priced."""

    layout: Layout
    capacity_rps: float  # requests/s at full steps
    light_s: float  # one request alone
    full_s: float  # one full step

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    def ttft_p90(self, rho: float) -> float:
        """Prefill part of TTFT at utilisation rho (service grows from a lone request to full steps)."""
        return self.light_s + rho * (self.full_s - self.light_s) + queue_wait_p90(rho, self.capacity_rps)

    def max_rate(self, budget_s: float) -> float:
        """Highest request rate (req/s) whose prefill p90 stays within `budget_s` (bisection on rho)."""
        if self.ttft_p90(0.0) > budget_s:
            return 0.0
        lo, hi = 0.0, RHO_MAX
        if self.ttft_p90(hi) <= budget_s:
            return hi * self.capacity_rps
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.ttft_p90(mid) <= budget_s else (lo, mid)
        return lo * self.capacity_rps


def price_prefill(pr: Pricer, layout: Layout, tr: Traffic) -> PrefillUnit:
    """Capacity and service times of a prefill instance for the mean prompt."""
    budget = layout.max_tokens_per_step
    if tr.new <= budget:
        per_step = max(1, int(budget // tr.new))
        full = pr.prefill(layout, (tr.new,) * per_step, tr.cached).period_s
        light = pr.prefill(layout, (tr.new,), tr.cached).period_s
        capacity = layout.dp * per_step / full
    else:  # chunked: ceil(new / budget) steps per request, each at the mean prefix
        steps = math.ceil(tr.new / budget)
        chunk = tr.new / steps
        one = pr.prefill(layout, (chunk,), tr.cached + tr.new / 2).period_s
        full = light = steps * one
        capacity = layout.dp / full
    return PrefillUnit(layout, capacity, light, full)


@dataclass(frozen=True)
class DecodeUnit:
    """One decode (or aggregated) instance shape, priced over a grid of batches per rank."""

    layout: Layout
    acceptance: float  # tokens per sequence per step
    batches: tuple[int, ...]  # grid, each <= max batch and KV capacity
    step_s: tuple[float, ...]  # step seconds per grid batch (aggregated: steps with a full chunk)
    avg_step_s: tuple[float, ...] = ()  # aggregated: steps with the rate-matched chunk
    first_token_s: tuple[float, ...] = ()  # aggregated: prefill part of TTFT at rho -> see ttft
    rho: tuple[float, ...] = ()  # aggregated: prefill share of the chunk budget per grid batch
    osl: float = 1.0
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    def _avg(self) -> tuple[float, ...]:
        return self.avg_step_s or self.step_s

    def rate(self, i: int) -> float:
        """Requests/s one instance sustains at grid batch i."""
        return self.rates[i]

    @cached_property
    def rates(self) -> tuple[float, ...]:
        """Requests/s at each grid batch."""
        avg = self._avg()
        return tuple(self.layout.dp * b * self.acceptance / (self.osl * a) for b, a in zip(self.batches, avg))

    def tpot(self, i: int) -> float:
        return self.step_s[i] / self.acceptance

    def at_rate(self, rate_rps: float, top: int) -> tuple[float, float]:
        """(operating batch, TPOT s) when one instance serves `rate_rps` with grid batch `top` as cap."""
        rates, steps = self.rates, self.step_s
        if rate_rps >= rates[top]:
            return float(self.batches[top]), steps[top] / self.acceptance
        if rate_rps <= rates[0]:
            return float(self.batches[0]), steps[0] / self.acceptance
        b = interp(rate_rps, rates, self.batches, top)
        return b, interp(b, self.batches, steps, top) / self.acceptance


def interp(x: float, xs, ys, top: int) -> float:
    """Piecewise-linear y(x) through (xs[i], ys[i]) for i <= top, xs increasing, xs[0] <= x <= xs[top]
    (numpy.interp's formula)."""
    j = bisect_right(xs, x, 0, top + 1) - 1
    if j >= top or xs[j] == x:
        return float(ys[min(j, top)])
    slope = (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j])
    return float(slope * (x - xs[j]) + ys[j])


def kv_batch_limit(pr: Pricer, layout: Layout, tr: Traffic) -> int:
    """Sequences per rank whose KV fits (at the longest mean context, with the sliding layers' blocks each holds,
    rackplan/policy/kv.py window_tokens)."""
    m = pr.model
    return int(kv_capacity_tokens(m, pr.hw, layout) // (tr.ctx_max + window_tokens(m, block_tokens(m.attention.kind))))


def price_decode(pr: Pricer, layout: Layout, tr: Traffic, grid: tuple[int, ...]) -> DecodeUnit | None:
    """Step table of a decode instance over the batch grid (None when no batch fits)."""
    limit = min(kv_batch_limit(pr, layout, tr), layout.max_batch_per_rank)
    batches = tuple(b for b in grid if b <= limit)
    if not batches:
        return None
    costs = [pr.decode(layout, float(b), tr.ctx_mean) for b in batches]
    if _idle_frontend(layout, costs):
        return None
    return DecodeUnit(layout, layout.tokens_per_step, batches, tuple(c.period_s for c in costs), osl=tr.osl)


def _idle_frontend(layout: Layout, costs: list[StepCost]) -> bool:
    """A frontend other than vLLM's default (more API-server processes, a longer stream interval)
    that changes no step of the grid (the API server never bounds it) is not a deployment of its own."""
    default = layout.api_servers is None and layout.stream_interval == 1
    return not default and not any(c.api_wait_s > 0 for c in costs)


def price_aggregated(pr: Pricer, layout: Layout, tr: Traffic, grid: tuple[int, ...]) -> DecodeUnit | None:
    """Step tables of an aggregated instance: decode batch b plus the prefill chunk that keeps up."""
    acc = layout.tokens_per_step
    q = float(layout.queries_per_step)
    limit = min(kv_batch_limit(pr, layout, tr), layout.max_batch_per_rank)
    rows, costs = [], []
    for b in (b for b in grid if b <= limit):
        room = layout.max_tokens_per_step - b * q  # chunk budget left after decode tokens
        need = b * acc * tr.new / tr.osl  # prefill tokens per step that match completions
        if room < 1 or need > RHO_MAX * room:
            break
        full_cost, dec_cost = pr.mixed(layout, float(b), tr.ctx_mean, room, tr.cached + tr.new / 2), \
            pr.decode(layout, float(b), tr.ctx_mean)
        costs += [full_cost, dec_cost]
        full, rho = full_cost.period_s, need / room
        # chunked prefill gives a prompt the whole room: a share rho of steps carry a full chunk
        avg = rho * full + (1.0 - rho) * dec_cost.period_s
        steps_per_prompt = math.ceil(tr.new / room)
        cap = layout.dp * room / (tr.new * full)
        ttft = steps_per_prompt * full + queue_wait_p90(rho, cap)
        rows.append((b, full, avg, ttft, rho))
    if not rows or _idle_frontend(layout, costs):
        return None
    b, full, avg, ttft, rho = (tuple(col) for col in zip(*rows, strict=False))
    return DecodeUnit(layout, acc, b, full, avg, ttft, rho, osl=tr.osl)
