"""Multi-turn sessions in the simulator: turns drawn or read, their prompts' KV blocks, the next
turn issued when the last one finished, and the session figures `simulate` reports.

A session's turn t + 1 prompt is its turn t prompt + turn t output + new user tokens, so its
leading blocks are the earlier turn's: full block j of a session holds the same tokens in every turn
that reaches past it and gets one id per (session, j); a prompt's last, partial block is its own.
Which of those blocks hit is decided by the prefix cache of the instance the turn is routed to
(sim/prefix_cache.py): only blocks still resident there, not evicted since, are reused. A prefill
instance caches the prompt blocks it computed; a turn's output KV sits on the decode instance, so
the next turn recomputes it (what a prefill/decode-disaggregated vLLM does: the prefill instance
never sees the output tokens). An aggregated instance caches the prompt blocks the same way (vLLM
would also cache the full blocks of the output there: a conservative simplification).

Session trace (`sessions.from_trace`): the multi-turn form of the Mooncake trace JSONL that AIPerf
replays (ai-dynamo/aiperf docs/benchmark-modes/trace-replay.md): `session_id`, `timestamp` (ms, the
first turn's arrival), `delay` (ms of think time after the previous turn's answer, later turns),
`input_length` (the turn's new tokens; the history accumulates) and `output_length`. Rows of a
session are its turns in file order.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from rackplan.specs import SpecError, Workload, sample_lengths
from rackplan.specs.reading import read_jsonl

from .workload import Requests

SESSION_SALT = 19  # salt of the session draws (a stream apart from the workload's other draws)


@dataclass(frozen=True)
class SessionTable:
    """Which session and turn each request is; rids run session by session, turn by turn."""

    session: np.ndarray  # [N] session index
    turn: np.ndarray  # [N] turn index within its session (0 = first)
    next_rid: np.ndarray  # [N] rid of the session's next turn, -1 after its last
    think_s: np.ndarray  # [N] seconds between this turn's end and the next turn's arrival


def session_requests(wl: Workload, n: int, seed: int) -> Requests:
    """Up to `n` turns of `wl`'s sessions (whole sessions, the last one cut at `n`), seeded."""
    if wl.sessions.from_trace:
        starts, new, osl, think = read_session_trace(wl.trace, n)
        starts = starts * wl.arrival.time_scale
    else:
        starts, new, osl, think = _draw_sessions(wl, n, np.random.default_rng([SESSION_SALT, seed]))
    return _assemble(starts, new, osl, think, n)


def _draw_sessions(wl: Workload, n: int, rng: np.random.Generator):
    """Sessions (Poisson starts at arrival.rate) until `n` turns: per session, arrays of new tokens,
    outputs and think times of its turns."""
    s = wl.sessions
    num = max(1, n)  # at most n sessions are needed (each has >= 1 turn)
    turns = sample_lengths(s.turns, num, rng)
    starts = np.cumsum(rng.exponential(1.0 / wl.arrival.rate, size=num))
    new, osl, think = [], [], []
    total = 0
    for k in range(num):
        t = int(turns[k])
        first = sample_lengths(wl.isl, 1, rng)
        later = sample_lengths(s.followup, t - 1, rng) if t > 1 else np.zeros(0, dtype=np.int64)
        new.append(np.concatenate([first, later]))
        osl.append(sample_lengths(wl.osl, t, rng))
        think.append(rng.exponential(s.think_s, size=t) if s.think_s > 0 else np.zeros(t))
        total += t
        if total >= n:
            return starts[:k + 1], new, osl, think
    return starts, new, osl, think


def _assemble(starts, new, osl, think, n: int) -> Requests:
    """Requests from per-session turn arrays: each prompt is the context so far plus its new tokens."""
    rows = []  # (session, turn, isl, osl, think)
    for s, (nw, out, th) in enumerate(zip(new, osl, think)):
        ctx = 0
        for t in range(len(nw)):
            isl = ctx + int(nw[t])
            rows.append((s, t, isl, int(out[t]), float(th[t])))
            ctx = isl + int(out[t])
    rows = rows[:n]
    a = np.array(rows, dtype=float).reshape(-1, 5)
    session, turn = a[:, 0].astype(np.int64), a[:, 1].astype(np.int64)
    last = np.append(session[1:] != session[:-1], True)
    next_rid = np.where(last, -1, np.arange(1, len(a) + 1))
    arrival = np.where(turn == 0, np.asarray(starts, dtype=float)[session], np.nan)
    isl = a[:, 2].astype(np.int64)
    table = SessionTable(session, turn, next_rid.astype(np.int64), a[:, 4])
    return Requests(arrival, isl, a[:, 3].astype(np.int64), np.zeros(len(a), dtype=np.int64), sessions=table)


def with_blocks(reqs: Requests, block_size: int) -> Requests:
    """`reqs` with each prompt's KV block ids at the engine's `block_size` (tokens per block)."""
    t = reqs.sessions
    blocks = []
    for rid in range(len(reqs)):
        s, isl = int(t.session[rid]), int(reqs.isl[rid])
        full = isl // block_size
        ids = [(s << 32) | j for j in range(full)]
        if isl % block_size:
            ids.append(-(rid + 1))  # the partial last block: this prompt's own
        blocks.append(tuple(ids))
    return replace(reqs, blocks=tuple(blocks), block_size=block_size)


def read_session_trace(path: str, limit: int):
    """A session trace -> (session starts s [S], then per session: new tokens, outputs, think s of its
    turns), sessions ordered by their first turn, at most `limit` turns read."""
    order, rows = [], {}
    for where, rec in read_jsonl(path, "session trace"):
        sid = rec.get("session_id")
        if not isinstance(sid, (str, int)) or isinstance(sid, bool):
            raise SpecError(where, "session_id", "a string or integer naming the session", sid)
        first = sid not in rows
        row = (_ms(rec, "timestamp", where) if first else None, _tokens(rec, "input_length", where, 1),
               _tokens(rec, "output_length", where, 1), _ms(rec, "delay", where, 0.0) if not first else 0.0)
        if first:
            order.append(sid)
            rows[sid] = []
        rows[sid].append(row)
        if sum(map(len, rows.values())) >= limit:
            break
    if not order:
        raise SpecError(path, "(file)", "at least one turn")
    order.sort(key=lambda sid: rows[sid][0][0])
    t0 = rows[order[0]][0][0]
    starts = np.array([(rows[sid][0][0] - t0) / 1e3 for sid in order])
    new = [np.array([r[1] for r in rows[sid]]) for sid in order]
    osl = [np.array([r[2] for r in rows[sid]]) for sid in order]
    # the think time read on turn t + 1 (its delay) belongs after turn t
    think = [np.append([r[3] / 1e3 for r in rows[sid][1:]], 0.0) for sid in order]
    return starts, new, osl, think


def _ms(rec: dict, key: str, where: str, default: float | None = None) -> float:
    v = rec.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
        raise SpecError(where, key, "milliseconds >= 0", v)
    return float(v)


def _tokens(rec: dict, key: str, where: str, least: int) -> int:
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise SpecError(where, key, f"a whole number of tokens >= {least}", v)
    return v


class NextTurns:
    """The sessions' loop: when a turn finishes, its session's next turn arrives `think_s` later."""

    def __init__(self, env, submit, table: SessionTable):
        self.env, self.submit, self.table = env, submit, table

    def __call__(self, rid: int) -> None:
        nxt = int(self.table.next_rid[rid])
        if nxt < 0:
            return
        self.env.timeout(float(self.table.think_s[rid])).callbacks.append(lambda _ev: self.submit(nxt))


def session_figures(reqs: Requests, cached: np.ndarray, ttft_s: np.ndarray, e2e_s: np.ndarray) -> dict:
    """Session figures over every turn of the run: [N] `cached` prompt tokens, TTFT and E2E per rid.
    hit_rate: cached / prompt tokens; reuse_hit_rate: cached / the tokens an earlier turn of the same
    session had already prefilled (what a perfect cache would serve); per turn index, its turns, hit
    rate and TTFT / E2E percentiles."""
    t = reqs.sessions
    isl = np.asarray(reqs.isl, dtype=float)
    cached = np.asarray(cached, dtype=float)
    prev = np.zeros(len(isl))  # prompt tokens of the session's previous turn (a prefill already computed)
    later = t.turn > 0
    prev[later] = isl[np.nonzero(later)[0] - 1]
    per_turn = []
    for k in range(int(t.turn.max()) + 1):
        m = t.turn == k
        per_turn.append({"turn": k + 1, "requests": int(m.sum()), "hit_rate": float(cached[m].sum() / isl[m].sum()),
                         "ttft_p50_s": _pct(ttft_s[m], 50), "ttft_p90_s": _pct(ttft_s[m], 90),
                         "e2e_p50_s": _pct(e2e_s[m], 50)})
    return {"sessions": int(t.session.max()) + 1, "turns": len(isl),
            "hit_rate": float(cached.sum() / isl.sum()),
            "reuse_hit_rate": float(cached[later].sum() / prev.sum()) if prev.sum() else float("nan"),
            "per_turn": per_turn}


def _pct(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else float("nan")
