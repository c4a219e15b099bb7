"""SLO classes: request classes of a workload (share, lengths, latency targets, priority).

A target is `<metric>_p<percentile>_s: <seconds>`, metric one of ttft, tpot, itl, e2e and percentile
one of 50, 90, 99 (e.g. `ttft_p99_s: 1.0`, `e2e_p90_s: 60`). A class holds its targets when each
percentile of its requests' metric is within its limit; a request is *good* when each of its own
figures is within every limit of its class (DistServe's per-request attainment), and a class's
attainment is the share of its good requests. ITL is a decode step's duration as every sequence in
it sees it: classes share the decode steps, so an ITL target is checked on the run's token-weighted
ITL percentiles, and a request's ITL figure is its mean inter-token time (its TPOT).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from .fields import check, non_negative
from .workload import LengthDist

METRICS = ("ttft", "tpot", "itl", "e2e")
PERCENTILES = (50, 90, 99)
TARGET_KEY = re.compile(r"^(ttft|tpot|itl|e2e)_p(50|90|99)_s$")


@dataclass(frozen=True)
class Target:
    """One latency target: `metric` at percentile `percentile` within `limit_s` seconds."""

    metric: str
    percentile: int
    limit_s: float

    @property
    def key(self) -> str:
        """The metric's summary key, as sim/metrics.py names it (ttft_p99_s, ...)."""
        return f"{self.metric}_p{self.percentile}_s"


def parse_targets(slo: dict[str, float]) -> tuple[Target, ...]:
    """`{ttft_p99_s: 1.0, ...}` -> Targets; a key outside metric x percentile is a SpecError."""
    out = []
    for key, limit in slo.items():
        m = TARGET_KEY.match(key)
        check(m is not None, f"slo.{key}", "a key <metric>_p<percentile>_s, metric one of ttft, tpot, itl, e2e, "
              "percentile one of 50, 90, 99 (e.g. ttft_p99_s)")
        check(limit > 0, f"slo.{key}", "a positive number of seconds", limit)
        assert m is not None  # (check raised otherwise)
        out.append(Target(m.group(1), int(m.group(2)), float(limit)))
    return tuple(out)


@dataclass(frozen=True)
class RequestClass:
    """A share of a workload's requests with its own lengths (None: the workload's), latency targets
    and priority (vLLM's `--scheduling-policy priority`: a lower value first, arrival order among
    equals; an engine's waiting queue takes a request ahead of every waiting one of a higher value.
    The simulator orders its queues so; the executor's serving loop runs FIFO)."""

    name: str
    share: float  # fraction of the workload's requests
    isl: Optional[LengthDist] = None
    osl: Optional[LengthDist] = None
    slo: dict[str, float] = field(default_factory=dict, hash=False)  # target key -> seconds
    priority: int = 0

    def __post_init__(self):
        check(bool(self.name) and self.name.replace("-", "").replace("_", "").isalnum(), "name",
              "a name of letters, digits, - and _", self.name)
        check(0.0 < self.share <= 1.0, "share", "a fraction in (0, 1]", self.share)
        non_negative(self.priority, "priority")
        parse_targets(self.slo)

    @property
    def targets(self) -> tuple[Target, ...]:
        return parse_targets(self.slo)


def check_classes(classes: tuple[RequestClass, ...]) -> None:
    """Shares summing to 1 and distinct names (SpecError naming `classes`)."""
    if not classes:
        return
    total = sum(c.share for c in classes)
    check(abs(total - 1.0) < 1e-9, "classes", "shares summing to 1", round(total, 12))
    names = [c.name for c in classes]
    check(len(set(names)) == len(names), "classes", "distinct class names", names)
