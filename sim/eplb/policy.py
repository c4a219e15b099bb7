"""EPLB placement policies as pure functions: logical experts (+ redundant replicas) -> GPU slots.

Expected per-expert load (historical counts, or the routing model's popularity) goes in; a
placement comes out in which every GPU holds the same number of expert slots and the heaviest
experts have replicas, so the busiest GPU's expected load is close to the mean.

- hierarchical: pack expert groups onto nodes by load (equal groups per node), replicate the
  heaviest experts within each node, pack each node's replicas onto its GPUs (equal slots per GPU).
  Keeps a group's tokens inside one node (group-limited routing sends each token to few nodes).
- global: the same with one group and one node: replicate over the whole EP group, then pack.

Shapes: L layers, E logical experts, P physical slots (E + redundant), G GPUs, N nodes; slot p
lives on GPU p // (P // G). Replicas of an expert share its tokens evenly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rackplan.specs import SpecError

POLICIES = ("hierarchical", "global", "none")


@dataclass(frozen=True)
class Placement:
    """Where each logical expert lives, per layer.

    phy2log: [L, P] logical expert in each physical slot.
    log2phy: [L, E, max_replicas] slots holding each logical expert, -1 padded.
    logcnt:  [L, E] replica count per logical expert (>= 1).
    """

    phy2log: np.ndarray
    log2phy: np.ndarray
    logcnt: np.ndarray
    num_gpus: int

    @property
    def slots_per_gpu(self) -> int:
        return self.phy2log.shape[1] // self.num_gpus

    def share(self) -> np.ndarray:
        """Fraction of each logical expert's tokens served by each GPU: [L, E, G]."""
        num_l, num_p = self.phy2log.shape
        gpu = np.arange(num_p) // self.slots_per_gpu  # [P]
        frac = 1.0 / np.take_along_axis(self.logcnt, self.phy2log, axis=1)  # [L, P]
        out = np.zeros((num_l, self.logcnt.shape[1], self.num_gpus))
        for lay in range(num_l):
            np.add.at(out[lay], (self.phy2log[lay], gpu), frac[lay])
        return out

    def gpu_load(self, weight: np.ndarray) -> np.ndarray:
        """Expected load per GPU for per-expert loads `weight` [L, E] (or [E]): [L, G]."""
        weight = np.atleast_2d(np.asarray(weight, float))
        return np.einsum("le,leg->lg", weight, self.share())


def check_weight(weight, num_slots: int, num_gpus: int, num_nodes: int = 1, num_groups: int = 1) -> np.ndarray:
    """Validate EPLB input; return loads as float [L, E]. Bad input raises a one-line SpecError."""
    w = np.asarray(weight, dtype=float)
    w = w[None] if w.ndim == 1 else w
    if w.ndim != 2 or w.shape[1] == 0:
        raise SpecError("eplb", "weight", "loads shaped [layers, num_experts]", w.shape)
    if not np.all(np.isfinite(w)):
        raise SpecError("eplb", "weight", "finite loads (no NaN or inf)", "non-finite value")
    if np.any(w < 0):
        raise SpecError("eplb", "weight", "loads >= 0", float(w.min()))
    num_e = w.shape[1]
    if num_gpus <= 0 or num_nodes <= 0 or num_gpus % num_nodes:
        raise SpecError("eplb", "num_gpus", f"a positive multiple of num_nodes ({num_nodes})", num_gpus)
    if num_slots < num_e:
        raise SpecError("eplb", "num_slots", f"at least the number of experts ({num_e})", num_slots)
    if num_slots % num_gpus:
        raise SpecError("eplb", "num_slots", f"a multiple of the number of GPUs ({num_gpus})", num_slots)
    if num_groups <= 0 or num_e % num_groups:
        raise SpecError("eplb", "num_groups", f"a divisor of the number of experts ({num_e})", num_groups)
    return w


def balanced_packing(weight: np.ndarray, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack n items into packs of exactly n / num_packs items each, balancing the pack sums.

    Heaviest item first into the lightest pack that still has room, then a swap pass that moves
    load off the heaviest pack. weight: [B, n]. Returns pack: [B, n] (pack of each item) and
    pos: [B, n] (its index inside the pack).
    """
    num_b, n = weight.shape
    cap = n // num_packs
    rows = np.arange(num_b)
    pack = np.zeros((num_b, n), dtype=np.int64)
    loads = np.zeros((num_b, num_packs))
    fill = np.zeros((num_b, num_packs), dtype=np.int64)
    for item in np.argsort(-weight, axis=1, kind="stable").T:  # [B] per step
        p = np.argmin(np.where(fill < cap, loads, np.inf), axis=1)
        pack[rows, item] = p
        loads[rows, p] += weight[rows, item]
        fill[rows, p] += 1
    if cap > 1 and num_packs > 1:
        for b in range(num_b):
            _swap_pass(weight[b], pack[b], num_packs)
    return pack, _position_in_group(pack)


def _swap_pass(w: np.ndarray, pack: np.ndarray, num_packs: int, max_swaps: int = 64) -> None:
    """Swap one item of the heaviest pack with one of another pack while that lowers the max."""
    for _ in range(max_swaps):
        loads = np.bincount(pack, weights=w, minlength=num_packs)
        top = int(np.argmax(loads))
        a = np.flatnonzero(pack == top)
        b = np.flatnonzero(pack != top)
        delta = w[a][:, None] - w[b][None, :]  # load moved off `top`
        new_other = loads[pack[b]][None, :] + delta
        gain = np.where((delta > 0) & (new_other < loads[top] - 1e-12 * loads[top]),
                        np.minimum(delta, loads[top] - new_other), 0.0)
        i, j = np.unravel_index(np.argmax(gain), gain.shape)
        if gain[i, j] <= 0:
            return
        pack[a[i]], pack[b[j]] = pack[b[j]], top


def _position_in_group(ids: np.ndarray) -> np.ndarray:
    """For each entry of ids [B, n], how many earlier entries in its row share its value."""
    order = np.argsort(ids, axis=1, kind="stable")
    srt = np.take_along_axis(ids, order, axis=1)
    idx = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    start = np.maximum.accumulate(np.where(np.diff(srt, axis=1, prepend=-1) != 0, idx, 0), axis=1)
    pos = np.empty_like(ids)
    np.put_along_axis(pos, order, idx - start, axis=1)
    return pos


def replicate_experts(weight: np.ndarray, num_phy: int) -> tuple[np.ndarray, np.ndarray]:
    """Give extra replicas to the experts with the highest load per replica.

    weight: [B, n]. Returns phy2log: [B, num_phy] (the first n slots are experts 0..n-1, then the
    replicas) and logcnt: [B, n] replicas per expert.
    """
    num_b, n = weight.shape
    rows = np.arange(num_b)
    phy2log = np.tile(np.arange(num_phy), (num_b, 1))
    logcnt = np.ones((num_b, n), dtype=np.int64)
    for slot in range(n, num_phy):
        e = np.argmax(weight / logcnt, axis=1)
        phy2log[:, slot] = e
        logcnt[rows, e] += 1
    return phy2log, logcnt


def rebalance_experts(weight, num_slots: int, num_gpus: int, num_nodes: int = 1, num_groups: int = 1,
                      policy: str = "hierarchical") -> Placement:
    """EPLB: per-layer expert loads -> a placement with equal slots per GPU.

    weight: [L, E] (or [E]) expected tokens per logical expert. num_slots: P = E + redundant.
    The hierarchical policy needs num_groups % num_nodes == 0; otherwise (and for "global") it
    runs over one node and one group.
    """
    if policy not in ("hierarchical", "global"):
        raise SpecError("eplb", "policy", "'hierarchical' or 'global' (use identity_placement for none)", policy)
    w = check_weight(weight, num_slots, num_gpus, num_nodes, num_groups)
    if policy == "global" or num_groups % num_nodes:
        num_nodes, num_groups = 1, 1
    phy2log = _hierarchical(w, num_slots, num_gpus, num_nodes, num_groups)
    # Greedy packing is not optimal: in the rare layer where it loses to no EPLB, keep the
    # contiguous layout (GPU loads exactly as without EPLB), so EPLB is never worse.
    fallback = np.broadcast_to(_contiguous_slots(w.shape[1], num_slots, num_gpus), phy2log.shape)
    worse = _max_gpu_load(w, phy2log, num_gpus) > _max_gpu_load(w, fallback, num_gpus)
    phy2log = np.where(worse[:, None], fallback, phy2log)
    return placement_from_phy2log(phy2log, w.shape[1], num_gpus)


def _contiguous_slots(num_experts: int, num_slots: int, num_gpus: int) -> np.ndarray:
    """No-EPLB layout in slots: each GPU's contiguous experts, spare slots filled with copies of
    its own experts (which leaves its load unchanged). [P]"""
    share = contiguous_share(num_experts, num_gpus)  # [E, G]
    per_gpu = num_slots // num_gpus
    rows = [np.resize(np.flatnonzero(share[:, g]), per_gpu) for g in range(num_gpus)]
    return np.concatenate(rows)


def _max_gpu_load(w: np.ndarray, phy2log: np.ndarray, num_gpus: int) -> np.ndarray:
    """Busiest GPU's expected load per layer, replicas sharing evenly: [L]."""
    cnt = np.stack([np.bincount(row, minlength=w.shape[1]) for row in phy2log])
    per_slot = np.take_along_axis(w / np.maximum(cnt, 1), phy2log, axis=1)
    return per_slot.reshape(len(w), num_gpus, -1).sum(-1).max(-1)


def _hierarchical(w: np.ndarray, num_slots: int, num_gpus: int, num_nodes: int, num_groups: int) -> np.ndarray:
    """Groups -> nodes, replicas within each node, replicas -> the node's GPUs. Returns phy2log [L, P]."""
    num_l, num_e = w.shape
    gsize, e_node, p_node = num_e // num_groups, num_e // num_nodes, num_slots // num_nodes
    group_node, group_pos = balanced_packing(w.reshape(num_l, num_groups, gsize).sum(-1), num_nodes)
    group_order = np.argsort(group_node * (num_groups // num_nodes) + group_pos, axis=1)  # node-major
    node_experts = (group_order[..., None] * gsize + np.arange(gsize)).reshape(num_l * num_nodes, e_node)
    w_node = np.take_along_axis(w, node_experts.reshape(num_l, num_e), axis=1).reshape(-1, e_node)
    local, cnt = replicate_experts(w_node, p_node)  # [L*N, P/N] node-local expert ids
    per_replica = np.take_along_axis(w_node / cnt, local, axis=1)
    gpu, pos = balanced_packing(per_replica, num_gpus // num_nodes)
    slots = np.empty_like(local)
    np.put_along_axis(slots, gpu * (num_slots // num_gpus) + pos, local, axis=1)
    return np.take_along_axis(node_experts, slots, axis=1).reshape(num_l, num_slots)


def placement_from_phy2log(phy2log: np.ndarray, num_experts: int, num_gpus: int) -> Placement:
    """Build log2phy and replica counts from a slot -> logical expert map [L, P]."""
    phy2log = np.atleast_2d(np.asarray(phy2log, dtype=np.int64))
    num_l, num_p = phy2log.shape
    logcnt = np.stack([np.bincount(row, minlength=num_experts) for row in phy2log])
    if np.any(logcnt == 0):
        raise SpecError("eplb", "phy2log", "every logical expert placed at least once")
    rep = _position_in_group(phy2log)
    log2phy = np.full((num_l, num_experts, int(logcnt.max())), -1, dtype=np.int64)
    layer = np.repeat(np.arange(num_l), num_p)
    log2phy[layer, phy2log.ravel(), rep.ravel()] = np.tile(np.arange(num_p), num_l)
    return Placement(phy2log, log2phy, logcnt, num_gpus)


def identity_placement(num_experts: int, num_gpus: int, num_layers: int = 1) -> Placement:
    """No EPLB: expert e in slot e, E / G contiguous experts per GPU (needs E % G == 0)."""
    check_weight(np.ones(num_experts), num_experts, num_gpus)
    return placement_from_phy2log(np.tile(np.arange(num_experts), (num_layers, 1)), num_experts, num_gpus)


def contiguous_share(num_experts: int, num_gpus: int) -> np.ndarray:
    """No EPLB, any E and G: contiguous experts, the first E % G GPUs one more. [E, G] in {0, 1}."""
    base, extra = divmod(num_experts, num_gpus)
    per_gpu = base + (np.arange(num_gpus) < extra)
    gpu_of = np.repeat(np.arange(num_gpus), per_gpu)
    share = np.zeros((num_experts, num_gpus))
    share[np.arange(num_experts), gpu_of] = 1.0
    return share
