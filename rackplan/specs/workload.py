"""Workload: arrival process, input/output length distributions, prefix-cache hit rate."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Optional, cast

import numpy as np

from .fields import OMIT_IF_NONE, check, non_negative, positive

# The fields each kind reads; one given to another kind would do nothing, so it is refused.
LENGTH_KEYS = {"fixed": ("value", "max"), "uniform": ("low", "high", "max"), "lognormal": ("mean", "sigma", "max"),
               "trace": ()}  # trace lengths are read as they are (sim/workload.py clips only drawn ones)
ARRIVAL_KEYS = {"poisson": ("rate",), "concurrency": ("concurrency",), "trace": ("time_scale",)}


def _only_keys_of_kind(spec, keys: dict[str, tuple[str, ...]]) -> None:
    """SpecError naming the first field set (not its default) that `spec.kind` does not read."""
    if spec.kind not in keys:
        return  # the kind itself is checked by its Literal on load
    for f in dataclasses.fields(spec):
        if f.name != "kind" and f.name not in keys[spec.kind] and getattr(spec, f.name) != f.default:
            reads = ", ".join(keys[spec.kind]) or "the trace"
            check(False, f.name, f"unset for kind {spec.kind} (it reads only: {reads})", getattr(spec, f.name))


@dataclass(frozen=True)
class LengthDist:
    """Token-length distribution: fixed, uniform [low, high], lognormal (mean, sigma), or trace."""

    kind: Literal["fixed", "uniform", "lognormal", "trace"]
    value: Optional[int] = None
    low: Optional[int] = None
    high: Optional[int] = None
    mean: Optional[float] = None  # mean length in tokens (lognormal)
    sigma: Optional[float] = None  # std-dev of log length (lognormal)
    max: Optional[int] = None  # clip

    def __post_init__(self):
        _only_keys_of_kind(self, LENGTH_KEYS)
        if self.kind == "fixed":
            check(self.value is not None and self.value > 0, "value", "a positive integer for kind fixed",
                  self.value)
        elif self.kind == "uniform":
            check(self.low is not None and self.low > 0, "low", "a positive integer", self.low)
            check(self.high is not None and self.high >= self.low, "high", f">= low ({self.low})", self.high)
        elif self.kind == "lognormal":
            check(self.mean is not None and self.mean > 0, "mean", "a positive number", self.mean)
            check(self.sigma is not None and self.sigma >= 0, "sigma", "a number >= 0", self.sigma)
        if self.max is not None:
            positive(self.max, "max")

    @property
    def expected(self) -> float:
        """Mean length in tokens (before clipping)."""
        if self.kind == "fixed":
            return float(cast(int, self.value))  # (set for its kind: __post_init__)
        if self.kind == "uniform":
            return (cast(int, self.low) + cast(int, self.high)) / 2
        if self.kind == "lognormal":
            return float(cast(float, self.mean))
        raise ValueError("trace lengths have no closed-form mean; read the trace")


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """[n] token lengths (int64) drawn from `dist` with `rng`, each at least 1 and at most `dist.max`:
    the one length sampler of the simulator's requests (sim/workload.py, sessions, request classes)
    and the executor's batch shapes (executor/workload.py), so one seed gives both the same lengths.
    Lognormal: mu = ln(mean) - sigma^2 / 2, so that the mean (before rounding and clipping) is `mean`.
    Trace lengths are read from the trace, never drawn (ValueError)."""
    if dist.kind == "fixed":
        out = np.full(n, dist.value)
    elif dist.kind == "uniform":
        out = rng.integers(cast(int, dist.low), cast(int, dist.high) + 1, size=n)
    elif dist.kind == "lognormal":
        sigma = cast(float, dist.sigma)
        mu = np.log(cast(float, dist.mean)) - sigma ** 2 / 2.0
        out = np.rint(rng.lognormal(mu, sigma, size=n))
    else:
        raise ValueError("trace lengths are read from the trace, not drawn")
    out = np.maximum(out, 1)
    if dist.max is not None:
        out = np.minimum(out, dist.max)
    return out.astype(np.int64)


@dataclass(frozen=True)
class Arrival:
    """Open-loop Poisson at `rate` req/s, closed-loop `concurrency`, or timestamps from a trace."""

    kind: Literal["poisson", "concurrency", "trace"]
    rate: Optional[float] = None
    concurrency: Optional[int] = None
    time_scale: float = 1.0  # trace replay: multiply inter-arrival times (0.5 = twice the load)

    def __post_init__(self):
        _only_keys_of_kind(self, ARRIVAL_KEYS)
        if self.kind == "poisson":
            check(self.rate is not None and self.rate > 0, "rate", "a positive request rate (req/s)",
                  self.rate)
        if self.kind == "concurrency":
            check(self.concurrency is not None and self.concurrency > 0, "concurrency",
                  "a positive integer", self.concurrency)
        positive(self.time_scale, "time_scale")


@dataclass(frozen=True)
class ChatTemplate:
    """The tokens a chat endpoint's template wraps each prompt in (system / role headers, generation prompt):
    the engine prefills them with the prompt and holds them in the KV cache, while a bench's input-token count
    (e.g. `vllm bench serve`'s "Total input tokens": the dataset prompts' own lengths) leaves them out. `cached`
    of them are served by the engine's prefix cache: the full KV blocks of the leading template tokens that every
    request shares (e.g. vLLM: floor(shared / block_size) * block_size). `source`: where the count was read."""

    tokens: int  # template tokens added to every prompt
    source: str
    cached: int = 0  # of `tokens`, served from the prefix cache

    def __post_init__(self):
        positive(self.tokens, "chat_template.tokens")
        check(bool(self.source.strip()), "chat_template.source", "where the token count was read")
        check(0 <= self.cached <= self.tokens, "chat_template.cached", f"in [0, tokens ({self.tokens})]",
              self.cached)


@dataclass(frozen=True)
class Workload:
    """Requests to serve. A trace file supplies arrivals and/or lengths (formats: sim/traces.py); a
    Mooncake trace's hash_ids also decide prefix-cache hits, in place of `prefix_hit_rate`."""

    name: str
    arrival: Arrival
    isl: LengthDist
    osl: LengthDist
    num_requests: int = 2000
    prefix_hit_rate: float = 0.0  # fraction of prompt tokens served from the prefix cache
    routing_skew: float = 0.0  # power-law exponent of expert popularity (0 = uniform)
    # expert load from data (sim/expert_load.py): "published" (the model family's published statistic,
    # rackplan/data/expert_load.yaml) or a file of recorded counts; None: routing_skew decides
    expert_load: Optional[str] = None
    # request classes (rackplan/specs/slo.py): shares, lengths, latency targets and priority of each;
    # () : one class, the plan's SLO
    classes: tuple["RequestClass", ...] = ()
    trace: Optional[str] = None
    # the readers' names in sim/traces.py (READERS), or auto: detected from the file
    trace_format: Literal["auto", "azure", "burstgpt", "mooncake", "jsonl", "vllm_bench"] = "auto"
    block_size: Optional[int] = None  # prompt tokens per hash_ids block (None: the format's, 512 for Mooncake)
    sessions: Optional[Sessions] = None  # multi-turn sessions (rackplan/specs/session.py); None: independent requests
    seed: int = 0
    description: str = ""
    # a chat endpoint's template tokens: prefilled with each prompt, left out of the input-token figures;
    # None: prompts reach the engine as they are (a completions endpoint)
    chat_template: Optional[ChatTemplate] = dataclasses.field(default=None, metadata=OMIT_IF_NONE)

    def __post_init__(self):
        positive(self.num_requests, "num_requests")
        non_negative(self.seed, "seed")
        check(0.0 <= self.prefix_hit_rate < 1.0, "prefix_hit_rate", "a fraction in [0, 1)",
              self.prefix_hit_rate)
        non_negative(self.routing_skew, "routing_skew")
        check(self.expert_load is None or self.routing_skew == 0, "routing_skew",
              "0 when expert_load is given (the data decides the expert load)", self.routing_skew)
        check(self.expert_load is None or bool(self.expert_load.strip()), "expert_load",
              "'published' or a file of recorded expert counts", self.expert_load)
        check_classes(self.classes)
        uses_trace = self.arrival.kind == "trace" or "trace" in (self.isl.kind, self.osl.kind)
        check(not uses_trace or bool(self.trace), "trace",
              "a trace file path when arrival or lengths come from a trace")
        check(self.trace_format == "auto" or self.trace is not None, "trace_format",
              "auto unless a trace file is given", self.trace_format)
        if self.block_size is not None:
            positive(self.block_size, "block_size")
            check(self.trace is not None and self.isl.kind == "trace", "block_size",
                  "unset unless prompt lengths (and their hash_ids) come from a trace", self.block_size)
        if self.sessions is not None:
            check_sessions(self)
        check(self.chat_template is None or self.sessions is None, "chat_template",
              "unset with sessions (their turns' prompts do not carry it)")

    @property
    def template_tokens(self) -> int:
        """Chat-template tokens the engine prefills with each prompt, beyond its `isl` (0 without one)."""
        return self.chat_template.tokens if self.chat_template else 0


from .session import Sessions, check_sessions  # noqa: E402  (session.py reads LengthDist from here)
from .slo import RequestClass, check_classes  # noqa: E402  (slo.py reads LengthDist from this module)
