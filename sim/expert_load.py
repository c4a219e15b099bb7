"""Expert load from data: the expected share of each expert in each MoE layer that a workload's
tokens pick, from published statistics or from recorded counts.

A workload's routing load is one of:
- a power-law exponent (`Workload.routing_skew`, sim/routing.py): the old knob, kept as it was;
- `expert_load: published`: the model family's published statistic (rackplan/data/expert_load.yaml,
  each with its source), turned into a per-layer popularity: log-normal shares at evenly spaced
  normal quantiles, their spread solved so the top expert's share over the mean equals the
  published max/mean, every layer ranked by its own seeded permutation;
- `expert_load: FILE`: recorded counts - the executor's expert_counts.jsonl or a .npy [steps, L, E]
  (sim/routing.read_expert_trace), or a vLLM EPLB state dump (JSON with `expert_load_window`
  [W, L, P] or [L, P] physical-expert counts and `physical_to_logical_map` [L, P], vLLM's EplbState
  names), folded to logical experts.
Either becomes an `ExpertLoad`: a per-layer popularity [L, E] with a key that identifies it (the
imbalance curves of sim/cost/imbalance.py are cached by it) and a label saying where it came from.

Shapes: L layers, E logical experts, P physical experts, W window steps.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import Union

import numpy as np

import rackplan
from rackplan.specs import ModelSpec, SpecError, Workload
from rackplan.specs.reading import read_json, read_yaml

from .routing import _cap, layer_popularity, popularity_from_counts, read_expert_trace

PUBLISHED = "published"  # Workload.expert_load: the model family's published statistic
TABLE_PATH = Path(rackplan.__file__).resolve().parent / "data" / "expert_load.yaml"  # package data, wheel too
SEED = 0  # the published model's per-layer rankings
EXPERT_LOAD_HELP = ("expert load: 'published' (the model family's published statistic, rackplan/data/expert_load.yaml) "
                    "or a file of recorded counts (the executor's expert_counts.jsonl, a .npy [steps, layers, experts],"
                    " a vLLM EPLB load-window JSON); replaces the workload's routing_skew / expert_load "
                    "(docs/workloads.md)")


@dataclass(frozen=True)
class ExpertLoad:
    """A per-layer expert popularity and where it came from; equal (and hashed) by `key` alone."""

    key: str  # identity: "published:<family>:<E>" or "counts:<sha256 of the popularity>"
    label: str  # where it came from, for reports
    popularity: np.ndarray = field(compare=False, repr=False)  # [L, E], rows summing to 1

    @property
    def max_over_mean(self) -> np.ndarray:
        """Top expert's share over the mean share, per layer: [L]."""
        return self.popularity.max(-1) * self.popularity.shape[-1]


RoutingLoad = Union[float, ExpertLoad]  # what a CostContext's `skew` carries


def routing_popularity(load: RoutingLoad, num_experts: int, num_layers: int, top_k: int = 1,
                       seed: int = 0) -> np.ndarray:
    """Popularity [num_layers, E] of a routing load: the power law's (a float) or the data's, its
    layers spread evenly over the recorded ones (repeated when there are fewer), each capped at
    1 / top_k (a token picks an expert at most once)."""
    if not isinstance(load, ExpertLoad):
        return layer_popularity(num_experts, load, num_layers, top_k, seed)
    pop = load.popularity
    if pop.shape[-1] != num_experts:
        raise SpecError(load.label, "expert_load", f"counts of {num_experts} experts (the model's)", pop.shape[-1])
    rows = np.linspace(0, len(pop) - 1, num_layers).round().astype(int) if len(pop) >= num_layers \
        else np.resize(np.arange(len(pop)), num_layers)
    return np.stack([_cap(pop[r], 1.0 / top_k) for r in rows])


def key_of(load: RoutingLoad) -> float | str:
    """What an imbalance curve is cached by: the exponent itself (old caches stay valid), or the key."""
    return load.key if isinstance(load, ExpertLoad) else float(load)


def describe(load: RoutingLoad) -> str:
    """One phrase naming the routing load, for reports."""
    if isinstance(load, ExpertLoad):
        return f"{load.label} (max/mean expert load {load.max_over_mean.mean():.2f} averaged over layers)"
    return "uniform routing (routing_skew 0)" if load == 0 else f"power-law routing skew {load:g}"


# -- published statistics -----------------------------------------------------------------------
def lognormal_shares(num_experts: int, max_over_mean: float) -> np.ndarray:
    """Shares [E] (summing to 1, largest first) at evenly spaced normal quantiles of a log-normal,
    its sigma solved (bisection) so that max / mean = `max_over_mean`."""
    if not (math.isfinite(max_over_mean) and 1.0 <= max_over_mean < num_experts):
        raise SpecError("expert_load", "max_over_mean", f"a ratio in [1, {num_experts})", max_over_mean)
    z = np.array([NormalDist().inv_cdf((j + 0.5) / num_experts) for j in range(num_experts)])[::-1]

    def ratio(sigma: float) -> float:
        w = np.exp(sigma * (z - z[0]))
        return float(w[0] * num_experts / w.sum())

    lo, hi = 0.0, 1.0
    while ratio(hi) < max_over_mean:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ratio(mid) < max_over_mean else (lo, mid)
    w = np.exp(hi * (z - z[0]))
    return w / w.sum()


def _table() -> dict:
    return read_yaml(TABLE_PATH, shipped=True)


def family_of(model: ModelSpec) -> str | None:
    """The published family of an embedded model (None: no published statistic for it)."""
    return _table()["models"].get(model.name)


def published(model: ModelSpec) -> RoutingLoad:
    """The model family's published expert load; uniform routing (0.0, as routing_skew 0) for a model
    whose family publishes none (reports say so: `describe`)."""
    family = family_of(model)
    return 0.0 if family is None else _published(family, model.moe.num_experts)


@lru_cache(maxsize=32)
def _published(family: str, num_experts: int, num_layers: int = 64) -> ExpertLoad:
    entry = _table()["families"][family]
    ratio = float(entry["max_over_mean"])
    shares = lognormal_shares(num_experts, ratio)
    rng = np.random.default_rng(SEED)
    pop = np.stack([shares[rng.permutation(num_experts)] for _ in range(num_layers)])
    return ExpertLoad(f"published:{family}:{ratio:g}:{num_experts}", f"published {family}: {entry['source']}", pop)


# -- recorded counts --------------------------------------------------------------------------------
def read_counts(path: str | Path) -> np.ndarray:
    """Recorded counts of a file -> [steps, L, E] (a vLLM EPLB dump is folded to logical experts)."""
    path = Path(path)
    if path.suffix != ".json":
        return read_expert_trace(path)
    data = read_json(path, "vLLM EPLB load record")
    if not isinstance(data, dict) or "expert_load_window" not in data:
        raise SpecError(str(path), "expert_load_window", "vLLM's EplbState load window ([W, L, P] or [L, P] counts)")
    load = np.asarray(data["expert_load_window"], dtype=float)
    p2l = np.asarray(data.get("physical_to_logical_map", np.arange(load.shape[-1])[None].repeat(load.shape[-2], 0)))
    if load.ndim == 2:
        load = load[None]
    if load.ndim != 3 or p2l.shape != load.shape[1:] or p2l.dtype.kind not in "iu" or p2l.min() < 0:
        raise SpecError(str(path), "physical_to_logical_map", f"a [L, P] map of expert ids matching the load "
                        f"window's [L, P] {list(load.shape[1:])}", list(p2l.shape))
    out = np.zeros(load.shape[:2] + (int(p2l.max()) + 1,))
    for layer in range(load.shape[1]):
        np.add.at(out[:, layer], (slice(None), p2l[layer]), load[:, layer])
    return out


def from_counts(path: str | Path) -> ExpertLoad:
    """The expected popularity of recorded counts (summed over steps), keyed by its content."""
    path = Path(path)
    stat = path.stat() if path.is_file() else None
    return _from_counts(str(path.resolve()), stat.st_mtime_ns if stat else 0, stat.st_size if stat else 0)


@lru_cache(maxsize=16)
def _from_counts(path: str, _mtime_ns: int, _size: int) -> ExpertLoad:
    pop = popularity_from_counts(read_counts(path))
    digest = hashlib.sha256(np.round(pop, 12).tobytes() + str(pop.shape).encode()).hexdigest()[:16]
    return ExpertLoad(f"counts:{digest}", f"recorded counts {Path(path).name}", pop)


# -- a workload's routing load ----------------------------------------------------------------------
def routing_load(workload: Workload, model: ModelSpec) -> RoutingLoad:
    """The routing load a workload prices `model` with: its expert_load (published or a file), else
    its routing_skew (0: uniform)."""
    if workload.expert_load is None:
        return workload.routing_skew
    if workload.expert_load == PUBLISHED:
        return published(model)
    return from_counts(workload.expert_load)


def with_expert_load(workload: Workload, source: str | None) -> Workload:
    """The workload with --expert-load's source (published or a file) in place of its own."""
    if source is None:
        return workload
    if source != PUBLISHED:
        read_counts(source)  # a missing or malformed file fails here, one line, before any work
    return replace(workload, expert_load=source, routing_skew=0.0)
