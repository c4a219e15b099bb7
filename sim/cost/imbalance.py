"""Expert-load imbalance: the per-step max-over-ranks factor that an EP step waits on.

factor = E[max over EP ranks of the rank's token-expert load] / mean, where a step's per-expert
counts are a multinomial draw of the batch's T * top_k choices from the routing load's popularity
(a power law, sim/routing.py, keyed by its exponent; or an expert load from data, sim/expert_load.py,
keyed by its key) and the placement is contiguous (policy "none") or EPLB's (sim/eplb) computed
from that popularity. Each configuration (ep, redundant, policy, skew, top_k, E, ...) has a curve
over a log-spaced grid of global tokens: a grid point is sampled (seeded, vectorised) the first
time a step needs it, and a lookup is a linear interpolation in log2(T). Each point also keeps the
standard deviation of one layer's factor over the sampled steps and layers (`spread`): a step of n
MoE layers averages n of them, so the simulator draws its factor per step around the mean with
spread / sqrt(n) (sim/pricer.py), which is what gives TPOT its tail.

Sampled points are cached on disk, one JSON file per configuration, keyed by the configuration and
a version of the sampling code (a hash of its source files and numpy's version), so a change to
either invalidates them; a point is the same whether sampled or read. The folder is
$RACKPLAN_CACHE_DIR (empty or "off": no disk cache), else $XDG_CACHE_HOME/rackplan or
~/.cache/rackplan.
`random_routing_factor` is the closed form for uniform routing, kept as a cross-check.
"""
from __future__ import annotations

import hashlib
import json
import math
from bisect import bisect_right
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rackplan.diskcache import cache_dir, store
from rackplan.specs import SpecError

if TYPE_CHECKING:  # (for annotations only; _popularity imports sim/expert_load.py when it runs)
    from ..expert_load import ExpertLoad

GRID_LOG2 = tuple(float(x) for x in np.arange(0.0, 21.5, 0.5))  # tokens_global from 1 to 2M, half-octave steps
NUM_LAYERS = 16  # sampled layers, each with its own permutation of the popularity
SAMPLES_PER_LAYER = 32  # multinomial draws per layer and grid point
SEED = 0
_SAMPLING_CODE = ("cost/imbalance.py", "routing.py", "expert_load.py", "eplb/model.py", "eplb/policy.py")  # under sim/


def random_routing_factor(tokens_global: float, top_k: int, ep: int) -> float:
    """Closed form for uniform routing: per-rank loads ~ Binomial(T*k, 1/ep), and the max of `ep`
    of them is about mean + sigma * sqrt(2 ln ep)."""
    if ep <= 1 or tokens_global <= 0:
        return 1.0
    mean = tokens_global * top_k / ep
    sigma = math.sqrt(mean * (1.0 - 1.0 / ep))
    return 1.0 + math.sqrt(2.0 * math.log(ep)) * sigma / mean


class Constant:
    """A factor that does not depend on the batch (fixed by the layout, or no EP): no spread."""

    def __init__(self, value: float):
        self.value = value

    def __call__(self, tokens_global: float) -> float:
        return self.value

    def spread(self, tokens_global: float) -> float:
        return 0.0


class Curve:
    """The factor of one configuration over tokens_global (grid points sampled on demand)."""

    def __init__(self, cfg: tuple):
        self.cfg = cfg
        self.points = _points(cfg)  # grid index -> factor, shared by every curve of this cfg

    def __call__(self, tokens_global: float) -> float:
        """Expected max/mean at `tokens_global` tokens."""
        return self._at(tokens_global, 0) if tokens_global > 0 else 1.0

    def spread(self, tokens_global: float) -> float:
        """Standard deviation of one MoE layer's max/mean over steps at `tokens_global` tokens."""
        return self._at(tokens_global, 1) if tokens_global > 0 else 0.0

    def _at(self, tokens_global: float, j: int) -> float:
        xs = GRID_LOG2
        x = math.log2(tokens_global) if tokens_global > 1.0 else 0.0
        i = bisect_right(xs, x)
        if i >= len(xs):
            return self.moments(len(xs) - 1)[j]
        if i == 0:
            return self.moments(0)[j]
        t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        lo, hi = self.moments(i - 1)[j], self.moments(i)[j]
        return lo + t * (hi - lo)

    def point(self, i: int) -> float:
        """The expected factor at grid point i."""
        return self.moments(i)[0]

    def moments(self, i: int) -> tuple[float, float]:
        """(expected factor, one layer's standard deviation) at grid point i, sampled on first use."""
        hit = self.points.get(i)
        if hit is None:
            hit = self.points[i] = _sample_point(self.cfg, i)
            _store(self.cfg, self.points)
        return hit


def imbalance_curve(top_k: int, num_experts: int, ep: int, skew: float = 0.0, redundant_experts: int = 0,
                    policy: str = "none", fixed: float | None = None, gpus_per_node: int = 8,
                    num_groups: int = 1) -> Constant | Curve:
    """Max-over-ranks / mean expert load as a function of a step's global tokens (a fixed factor
    wins when given). gpus_per_node and num_groups matter only to the hierarchical policy
    (hardware and model expert groups); with num_groups % nodes != 0 it falls back to global."""
    if fixed is not None:
        return Constant(fixed)
    if ep <= 1:
        return Constant(1.0)
    if policy not in ("none", "global", "hierarchical"):
        raise SpecError("eplb", "policy", "one of 'hierarchical', 'global', 'none'", policy)
    if policy == "none":
        redundant_experts, gpus_per_node, num_groups = 0, 8, 1
    slots = num_experts + redundant_experts
    if policy != "none" and slots % ep:
        raise SpecError("eplb", "redundant_experts",
                        f"num_experts + redundant_experts ({slots}) divisible by ep ({ep})", redundant_experts)
    return Curve((ep, redundant_experts, policy, _key(skew), top_k, num_experts, gpus_per_node, num_groups))


def imbalance_factor(tokens_global: float, top_k: int, num_experts: int, ep: int,
                     skew: float = 0.0, redundant_experts: int = 0, policy: str = "none",
                     fixed: float | None = None, gpus_per_node: int = 8, num_groups: int = 1) -> float:
    """Max-over-ranks / mean expert load for one step (see `imbalance_curve`)."""
    if fixed is not None:
        return fixed
    if ep <= 1 or tokens_global <= 0:
        return 1.0
    return imbalance_curve(top_k, num_experts, ep, skew, redundant_experts, policy, None, gpus_per_node,
                           num_groups)(tokens_global)


def factor_table(ep: int, redundant_experts: int, policy: str, skew: float, top_k: int,
                 num_experts: int, gpus_per_node: int = 8, num_groups: int = 1) -> tuple[tuple, tuple]:
    """(log2 tokens_global grid, factor at each point) of one configuration, all points sampled."""
    curve = imbalance_curve(top_k, num_experts, ep, skew, redundant_experts, policy, None, gpus_per_node, num_groups)
    assert isinstance(curve, Curve), "factor_table of a configuration without a sampled curve (ep <= 1)"
    return GRID_LOG2, tuple(curve.point(i) for i in range(len(GRID_LOG2)))


def placement(ep: int, redundant_experts: int, policy: str, skew: float, top_k: int, num_experts: int,
              gpus_per_node: int = 8, num_groups: int = 1):
    """The EPLB placement (sim.eplb.Placement, one row per sampled layer) this module prices a
    configuration with: the policy over the routing model's popularity (what `execute` runs too)."""
    return _placement((ep, redundant_experts, policy, _key(skew), top_k, num_experts, gpus_per_node, num_groups))


# -- routing loads: a power-law exponent (cached by its value) or an ExpertLoad (by its key) ---------
_LOADS: dict[str, ExpertLoad] = {}  # key -> the ExpertLoad it names, registered when a curve is asked for


def _key(skew) -> float | str:
    """The cache key of a routing load (sim/expert_load.py: a float exponent or an ExpertLoad)."""
    if isinstance(skew, (int, float)):
        return float(skew)
    _LOADS.setdefault(skew.key, skew)
    return skew.key


def _popularity(key: float | str, num_experts: int, top_k: int) -> np.ndarray:
    """The sampled layers' popularity [NUM_LAYERS, E] of a routing load's key."""
    from ..expert_load import routing_popularity

    return routing_popularity(_LOADS[key] if isinstance(key, str) else key, num_experts, NUM_LAYERS, top_k, SEED)


def _seed_of(key: float | str) -> int:
    """A per-load integer seed: the exponent's millionths (as before) or the key's hash."""
    if isinstance(key, str):
        return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)
    return int(round(key * 1e6))


# -- sampling (its modules imported here: a run whose points are all cached never loads them) -------
@lru_cache(maxsize=None)
def _placement(cfg: tuple):
    from ..eplb.model import placement_for

    ep, redundant, policy, skew, top_k, num_experts, gpus_per_node, num_groups = cfg
    pop = _popularity(skew, num_experts, top_k)
    return placement_for(pop, ep, redundant, policy, gpus_per_node, num_groups)


@lru_cache(maxsize=256)
def _draws(skew: float | str, top_k: int, num_experts: int, i: int) -> np.ndarray:
    """Expert counts [1, samples, layers, E] at grid point i, shared by every placement (common
    random numbers); seeded per point, so a point is the same whichever points were asked first."""
    from ..routing import sample_counts

    pop = _popularity(skew, num_experts, top_k)
    tokens = np.array([int(round(2.0 ** GRID_LOG2[i]))], dtype=np.int64)
    rng = np.random.default_rng([SEED, num_experts, top_k, _seed_of(skew), i])
    return sample_counts(pop, tokens, top_k, SAMPLES_PER_LAYER, rng).astype(np.float32)


def _sample_point(cfg: tuple, i: int) -> tuple[float, float]:
    from ..eplb.model import factor_moments

    ep, _, _, skew, top_k, num_experts = cfg[:6]
    counts = _draws(skew, top_k, num_experts, i)
    mean, std = factor_moments(counts, ep, _placement(cfg), SEED)
    return float(max(mean[0], 1.0)), float(std[0])


# -- the disk cache ---------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def sampling_version() -> str:
    """Hash of the code and numpy version that sample a point: a change to either is a new cache."""
    h = hashlib.sha256(np.__version__.encode())
    sim = Path(__file__).resolve().parents[1]
    for rel in _SAMPLING_CODE:
        path = sim / rel
        h.update(path.read_bytes() if path.is_file() else rel.encode())
    return h.hexdigest()[:16]


def _cache_file(cfg: tuple) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    key = json.dumps({"cfg": list(cfg), "version": sampling_version()}, sort_keys=True)
    return folder / "imbalance" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


_POINTS: dict[tuple, dict[int, tuple[float, float]]] = {}


def _points(cfg: tuple) -> dict[int, tuple[float, float]]:
    """The in-process points of a configuration, first read from its cache file (if any)."""
    hit = _POINTS.get(cfg)
    if hit is None:
        hit = _POINTS[cfg] = _read(_cache_file(cfg), cfg)
    return hit


def _read(path: Path | None, cfg: tuple) -> dict[int, tuple[float, float]]:
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        if data.get("cfg") != list(cfg) or data.get("version") != sampling_version():
            return {}
        return {int(k): (float(v[0]), float(v[1])) for k, v in data["points"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # unreadable or corrupt: sample again (and overwrite it)


def _store(cfg: tuple, points: dict[int, tuple[float, float]]) -> None:
    """Merge `points` into the configuration's cache file (atomic replace; best effort)."""
    path = _cache_file(cfg)
    if path is None:
        return
    merged = {**_read(path, cfg), **points}
    store(path, json.dumps({"cfg": list(cfg), "version": sampling_version(),
                            "points": {str(k): list(merged[k]) for k in sorted(merged)}}))


def _clear_caches() -> None:
    """Forget every in-process point and placement (the disk cache stays)."""
    _POINTS.clear()
    _placement.cache_clear()
    _draws.cache_clear()


factor_table.cache_clear = _clear_caches  # type: ignore[attr-defined]
