"""Routing load models: which experts a batch's tokens pick, per layer and per step.

Expert popularity follows a power law over expert rank, p_j ~ (j + 1)^-skew (skew 0 = uniform),
capped at 1/top_k because a token picks an expert at most once; every layer ranks its experts by
its own random permutation. A step's load is a multinomial draw of the batch's T * top_k
token-expert choices from that popularity, so small decode batches show their real variance.
Recorded per-step expert counts (from the executor's router) are an input too.

Shapes: L layers, E experts, N samples; counts are token-expert pairs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from rackplan.specs import SpecError
from rackplan.specs.reading import read_jsonl


def popularity(num_experts: int, skew: float, top_k: int = 1) -> np.ndarray:
    """Expected share of token-expert pairs per expert, most popular first: [E], sums to 1."""
    if skew < 0 or not np.isfinite(skew):
        raise SpecError("routing", "skew", "a finite value >= 0", skew)
    weight = np.arange(1, num_experts + 1, dtype=float) ** -float(skew)
    return _cap(weight / weight.sum(), 1.0 / top_k)


def _cap(p: np.ndarray, cap: float) -> np.ndarray:
    """Water-fill: clip shares above `cap` and spread the excess over the rest, keeping the sum 1."""
    p = p.copy()
    for _ in range(len(p)):
        over = p > cap * (1 + 1e-12)
        if not over.any():
            break
        free = ~over & (p < cap)
        excess = float(np.sum(p[over] - cap))
        p[over] = cap
        p[free] += excess * p[free] / p[free].sum()
    return p


def layer_popularity(num_experts: int, skew: float, num_layers: int, top_k: int = 1,
                     seed: int = 0) -> np.ndarray:
    """Popularity per layer, each layer's ranking a random permutation of the experts: [L, E]."""
    ranked = popularity(num_experts, skew, top_k)
    rng = np.random.default_rng(seed)
    return np.stack([ranked[rng.permutation(num_experts)] for _ in range(num_layers)])


def sample_counts(pop: np.ndarray, tokens: np.ndarray, top_k: int, num_samples: int,
                  rng: np.random.Generator) -> np.ndarray:
    """Per-step expert counts for batches of `tokens` global tokens.

    pop: [E] or [L, E]; tokens: [Nt] integers. Returns [Nt, N, E] or [Nt, N, L, E] counts, each
    row a multinomial draw of tokens * top_k choices.
    """
    pairs = np.asarray(tokens, dtype=np.int64) * top_k
    extra = (1,) * np.ndim(pop)
    size = (len(pairs), num_samples) + np.shape(pop)[:-1]
    return rng.multinomial(pairs.reshape((-1,) + extra), pop, size=size)


def read_expert_trace(path: str | Path) -> np.ndarray:
    """Recorded expert counts -> [steps, L, E] token-expert pairs per step, layer and expert.

    JSONL: one object per (step, layer[, rank]) with "step", "layer" and "expert_counts" (a list of
    E counts of the tokens that rank's router sent to each logical expert); records of one step
    and layer from several ranks are summed. A .npy file holds the [steps, L, E] array directly.
    """
    path = Path(path)
    if not path.is_file():
        raise SpecError(str(path), "(file)", "an existing expert-count trace (.jsonl or .npy)")
    if path.suffix == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise SpecError(str(path), "(file)", "a readable .npy array", str(exc).splitlines()[0][:80]) from None
        if arr.ndim != 3:
            raise SpecError(str(path), "(shape)", "a [steps, layers, experts] array", list(arr.shape))
        return check_counts(arr, str(path))
    recs = [_trace_record(rec, where) for where, rec in read_jsonl(path, "expert-count trace")]
    if not recs:
        raise SpecError(str(path), "(file)", "at least one record")
    num_e = {len(c) for _, _, c in recs}
    if len(num_e) != 1:
        raise SpecError(str(path), "expert_counts", "the same number of experts on every line", sorted(num_e))
    steps = sorted({s for s, _, _ in recs})
    out = np.zeros((len(steps), max(lay for _, lay, _ in recs) + 1, num_e.pop()))
    index = {s: i for i, s in enumerate(steps)}
    for step, layer, counts in recs:
        out[index[step], layer] += counts
    return out


def _trace_record(rec: dict, where: str) -> tuple[int, int, np.ndarray]:
    for key in ("step", "layer"):
        if not isinstance(rec.get(key), int) or isinstance(rec.get(key), bool) or rec[key] < 0:
            raise SpecError(where, key, "an integer >= 0", rec.get(key))
    counts = rec.get("expert_counts")
    if not isinstance(counts, list) or not counts:
        raise SpecError(where, "expert_counts", "a non-empty list of counts", counts)
    return rec["step"], rec["layer"], check_counts(np.asarray(counts, dtype=float), where)


def check_counts(counts: np.ndarray, where: str = "routing") -> np.ndarray:
    """Loads or counts must be finite and >= 0 (SpecError otherwise)."""
    counts = np.asarray(counts, dtype=float)
    if not np.all(np.isfinite(counts)):
        raise SpecError(where, "expert_counts", "finite values (no NaN or inf)", "non-finite value")
    if np.any(counts < 0):
        raise SpecError(where, "expert_counts", "values >= 0", float(counts.min()))
    return counts


def popularity_from_counts(counts: np.ndarray) -> np.ndarray:
    """Historical load -> popularity per layer: [steps, L, E] -> [L, E], rows summing to 1."""
    total = check_counts(counts).sum(axis=0)
    rows = total.sum(axis=-1, keepdims=True)
    if np.any(rows <= 0):
        raise SpecError("routing", "expert_counts", "at least one routed token in every layer")
    return total / rows
