"""Multi-turn sessions: a workload whose requests are the turns of conversations.

A session starts at the workload's arrival process (Poisson: `arrival.rate` is sessions per second;
trace: the session trace's first turns). Its first turn's prompt is drawn from the workload's `isl`;
each later turn's prompt is the previous turn's prompt, plus that turn's output, plus `followup` new
user tokens, and it arrives `think_s` (exponential with that mean) after the previous turn finished.
Every turn's output is drawn from the workload's `osl`. With `from_trace` the turns, their new tokens,
outputs and think times come from a session trace instead (sim/sessions.py reads it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .fields import check, non_negative
from .workload import LengthDist


@dataclass(frozen=True)
class Sessions:
    """Turns per session, new user tokens per later turn, and the think time between turns."""

    turns: Optional[LengthDist] = None  # turns per session (>= 1)
    followup: Optional[LengthDist] = None  # new user tokens appended by each turn after the first
    think_s: float = 0.0  # mean think time between a turn's end and the next turn's arrival (s, exponential)
    from_trace: bool = False  # turns, new tokens, outputs and think times from the workload's session trace

    def __post_init__(self):
        non_negative(self.think_s, "think_s")
        if self.from_trace:
            for name in ("turns", "followup"):
                check(getattr(self, name) is None, name, "unset with from_trace (the trace gives it)",
                      getattr(self, name))
            check(self.think_s == 0.0, "think_s", "0 with from_trace (the trace's delay gives it)", self.think_s)
            return
        for name in ("turns", "followup"):
            dist = getattr(self, name)
            check(dist is not None and dist.kind != "trace", name, "a length distribution (fixed, uniform or "
                  "lognormal) unless from_trace", dist.kind if dist is not None else None)


def check_sessions(wl) -> None:
    """The fields of a session workload `wl` (a Workload) that sessions give another meaning or refuse."""
    s = wl.sessions
    check(wl.prefix_hit_rate == 0.0, "prefix_hit_rate", "0 with sessions (the turns' shared context and each "
          "instance's prefix cache decide the hits)", wl.prefix_hit_rate)
    traced = (wl.arrival.kind, wl.isl.kind, wl.osl.kind) == ("trace",) * 3
    if s.from_trace:
        check(traced, "arrival.kind", "trace, with isl and osl kind trace, for sessions.from_trace", wl.arrival.kind)
        check(wl.trace_format == "auto", "trace_format", "auto (a session trace has its own reader, "
              "sim/sessions.py)", wl.trace_format)
        return
    check(wl.arrival.kind == "poisson", "arrival.kind", "poisson (session starts per second) for drawn sessions; "
          "a session trace needs sessions.from_trace", wl.arrival.kind)
    check("trace" not in (wl.isl.kind, wl.osl.kind), "isl.kind", "a drawn length for drawn sessions", wl.isl.kind)
