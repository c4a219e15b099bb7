"""Request generation: arrival times and token lengths from a Workload spec (seeded), or a trace
(sim/traces.py reads the public formats). The one place the simulator's requests are drawn.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from rackplan.specs import SpecError, Workload, sample_lengths

if TYPE_CHECKING:
    from .sessions import SessionTable


@dataclass(frozen=True)
class Requests:
    """Requests to simulate. arrival_s is NaN for closed-loop workloads (issued on completion).

    With `blocks` (a trace's hash_ids) `cached` is all zero here: the simulator's prefix caches
    decide the hits as requests run (sim/prefix_cache.py)."""

    arrival_s: np.ndarray  # [N] seconds
    isl: np.ndarray  # [N] prompt tokens the engine prefills (a chat template's included: Workload.template_tokens)
    osl: np.ndarray  # [N] output tokens
    cached: np.ndarray  # [N] prompt tokens served from the prefix cache (flat prefix_hit_rate)
    blocks: Optional[tuple[tuple[int, ...], ...]] = None  # [N] block hashes of each prompt
    block_size: int = 0  # prompt tokens per block (with blocks)
    sessions: Optional["SessionTable"] = None  # multi-turn sessions (sim/sessions.py): follow-up turns' arrival_s NaN
    priority: Optional[np.ndarray] = None  # [N] request class priority (lower first); None: FIFO

    def __len__(self) -> int:
        return len(self.isl)


def make_requests(wl: Workload, num_requests: int | None = None, seed: int | None = None) -> Requests:
    """Draw the workload's requests deterministically from `seed` (default: the workload's)."""
    n = num_requests or wl.num_requests
    if wl.sessions is not None:
        from .sessions import session_requests

        return session_requests(wl, n, wl.seed if seed is None else seed)
    rng = np.random.default_rng(wl.seed if seed is None else seed)
    trace = None
    if wl.trace:
        from .traces import load_trace  # (trace workloads only: the others never load the trace readers)

        trace = load_trace(wl, limit=n)
    if trace is not None:
        n = min(n, len(trace))
    return _draw(wl, n, rng, trace, 0.0)


def _draw(wl: Workload, n: int, rng: np.random.Generator, trace, t0_s: float, first: int = 0) -> Requests:
    """n requests (indices first ..): lengths from `rng` (or the trace's first n), Poisson arrivals
    after `t0_s`; request classes redraw their own lengths after (sim/request_classes.py)."""
    isl = trace.isl[:n] if wl.isl.kind == "trace" else sample_lengths(wl.isl, n, rng)
    osl = trace.osl[:n] if wl.osl.kind == "trace" else sample_lengths(wl.osl, n, rng)
    if wl.arrival.kind == "poisson":
        arrival = t0_s + np.cumsum(rng.exponential(1.0 / wl.arrival.rate, size=n))
    elif wl.arrival.kind == "trace":
        if trace.arrival_s is None:
            raise SpecError(wl.name, "arrival.kind", "poisson or concurrency (this trace has no arrival times)",
                            "trace")
        arrival = trace.arrival_s[:n] * wl.arrival.time_scale
    else:
        arrival = np.full(n, np.nan)
    blocks = trace.blocks[:n] if trace is not None and trace.blocks is not None and wl.isl.kind == "trace" else None
    if blocks is not None and wl.prefix_hit_rate > 0:
        raise SpecError(wl.name, "prefix_hit_rate", "0 with a trace that has hash_ids (its block hashes decide "
                        "the hits)", wl.prefix_hit_rate)
    if blocks is not None and wl.chat_template is not None:
        raise SpecError(wl.name, "chat_template", "unset with a trace that has hash_ids (its block hashes are of "
                        "the prompts as recorded)")
    priority = None
    if wl.classes:
        from .request_classes import class_priority, with_class_lengths

        isl, osl = with_class_lengths(wl, isl, osl, first, rng)
        priority = class_priority(wl, first, n)
    cached = np.floor(isl * wl.prefix_hit_rate).astype(np.int64)
    if wl.chat_template is not None:  # the engine's prompt: the template's tokens too, its shared blocks cached
        isl = isl + wl.chat_template.tokens
        cached = cached + wl.chat_template.cached
    cached = np.minimum(cached, isl - 1)  # at least one token is always computed
    return Requests(arrival.astype(float), isl.astype(np.int64), osl.astype(np.int64), cached, blocks,
                    trace.block_size if blocks is not None else 0, priority=priority)


STREAM_CHUNK = 8192  # requests a stream draws at a time (each chunk from its own seeded generator)
STREAM_SALT = 16  # salt of a stream's chunk generators (a stream apart from make_requests' draws)


class RequestStream:
    """The open-loop requests of a steady-state run, drawn STREAM_CHUNK at a time, chunk k from its
    own generator seeded [salt, seed, k]: the first n requests never depend on how many are drawn
    after them, so a run continued from n to 2n requests is the run of 2n (sim/simulator.Run). A
    trace workload is one chunk: the trace itself, up to `limit` requests."""

    def __init__(self, wl: Workload, seed: int | None, limit: int):
        if wl.sessions is not None:  # later turns wait on earlier ones: no stream of independent chunks
            raise SpecError(wl.name, "sessions", "unset for a continued steady-state run (plan, whatif, sweep size "
                            "independent requests; `rackplan simulate` runs a session workload whole)")
        self.wl, self.seed, self.limit = wl, wl.seed if seed is None else seed, limit
        self.drawn, self.t_last_s = 0, 0.0

    def next(self) -> Requests | None:
        """The next chunk of requests (None once the stream is done)."""
        if self.drawn >= self.limit or (self.wl.trace and self.drawn):
            return None
        rng = np.random.default_rng([STREAM_SALT, self.seed, self.drawn // STREAM_CHUNK])
        if self.wl.trace:
            from .traces import load_trace

            trace = load_trace(self.wl, limit=self.limit)
            out = _draw(self.wl, min(self.limit, len(trace)), rng, trace, 0.0)
        else:
            out = _draw(self.wl, STREAM_CHUNK, rng, None, self.t_last_s, self.drawn)
        self.drawn += len(out)
        if len(out):
            self.t_last_s = float(out.arrival_s[-1])
        return out if len(out) else None
