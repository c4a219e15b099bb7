"""DP attention + EP MoE over torch.distributed: process groups, dispatch and combine.

One MoE layer on rank r of an EP group of W ranks (DeepEP's normal-mode flow, with plain
collectives):
  1. map each token's top-k logical experts to physical slots (placement.map_to_slots; identity
     by default),
  2. sort the token-expert pairs by slot (permute),
  3. exchange per-slot counts (all_to_all_single), so every receiver knows its splits,
  4. dispatch rows with all_to_all_single (uneven splits, always taken from the exchanged counts),
  5. regroup the received rows by local slot and run the grouped expert GEMM,
  6. combine: all_to_all_single back, then unpermute with the routing weights (weighted sum).
Dual-batch overlap runs two micro-batches so one's all-to-all hides behind the other's experts.
At EP1 there is no exchange: the permute into expert order and the weighted unpermute run
locally and are timed as their own op, `moe.route` (moe_local).

The static path (moe_forward_static, DeepEP low-latency style, used for decode on GPU) keeps
every size on the device: each rank sends a fixed-capacity block per expert slot [S, C, H]
(C = the layout's tokens per rank per step, the most one source can route to one slot), counts
and rows move in equal-split all-to-alls, and the experts run one batched GEMM over the padded
blocks, so no .tolist() / .item() host sync sits on the hot path (at the price of computing the
padding rows; a masked grouped GEMM would skip them).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .kernels.permute import permute, unpermute
from .placement import map_to_slots


def init_distributed(backend: str, rank: int, world: int, init: str, timeout_s: float):
    """Join the default group with an explicit collective timeout, through the launcher's TCPStore
    (`init` = "tcp://host:port"; its ops take ~15 us, which the serving control plane uses) or a
    FileStore rendezvous (`init` = a file path)."""
    timeout = timedelta(seconds=timeout_s)
    if init.startswith("tcp://"):
        host, port = init[len("tcp://"):].rsplit(":", 1)
        store = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    else:
        store = dist.FileStore(init, world)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def init_from_env(backend: str, timeout_s: float) -> tuple[int, int]:
    """torchrun: RANK / WORLD_SIZE / MASTER_ADDR from the environment."""
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size()


def slot_bounds(num_slots: int, ep: int) -> list[int]:
    """First slot of each rank (plus the end): contiguous, as even as possible."""
    return [r * num_slots // ep for r in range(ep + 1)]


@dataclass
class EPGroup:
    """One EP group and its expert placement.

    phy2log [S] is the logical expert of every physical slot (DeepSeek EPLB's output format);
    rank r holds slots bounds[r]:bounds[r+1]. A logical expert with several replicas spreads its
    token choices round-robin over them (placement.map_to_slots, offset by the source rank)."""

    group: object  # ProcessGroup, or None for a single process
    rank: int
    size: int
    phy2log: torch.Tensor
    bounds: list[int]
    log2phy: torch.Tensor  # [E, max replicas], -1 padded
    replicas: torch.Tensor  # [E]

    @property
    def local_logical(self) -> list[int]:
        return self.phy2log[self.bounds[self.rank]:self.bounds[self.rank + 1]].tolist()

    @property
    def slots_per_rank(self) -> list[int]:
        return [self.bounds[i + 1] - self.bounds[i] for i in range(self.size)]

    def with_placement(self, placement) -> "EPGroup":
        """The same group with another placement (one MoE layer's EPLB phy2log)."""
        return make_ep_group(self.group, self.rank, self.size, len(self.replicas), placement)


def make_ep_group(group, rank: int, size: int, num_experts: int, placement=None) -> EPGroup:
    """`placement`: None (identity), a phy2log tensor/list, or an object with `.phy2log`."""
    if placement is None:
        phy2log = torch.arange(num_experts)
    else:
        phy2log = torch.as_tensor(getattr(placement, "phy2log", placement), dtype=torch.long).reshape(-1)
    if not torch.equal(torch.unique(phy2log), torch.arange(num_experts)):
        raise ValueError("placement must hold every logical expert at least once")
    replicas = torch.bincount(phy2log, minlength=num_experts)
    log2phy = torch.full((num_experts, int(replicas.max())), -1, dtype=torch.long)
    fill = torch.zeros(num_experts, dtype=torch.long)
    for slot, e in enumerate(phy2log.tolist()):
        log2phy[e, fill[e]] = slot
        fill[e] += 1
    return EPGroup(group, rank, size, phy2log, slot_bounds(len(phy2log), size), log2phy, replicas)


def to_slots(ids: torch.Tensor, ep: EPGroup) -> torch.Tensor:
    """Logical expert ids [T, k] -> physical slots [T, k]: the choices of one expert go round-robin
    over its replicas in token order, starting at this rank's offset (placement.map_to_slots), so a
    replicated expert's load splits exactly evenly, as the simulator's imbalance model assumes."""
    if ids.numel() == 0 or int(ep.log2phy.shape[1]) == 1:
        return ep.log2phy.to(ids.device)[ids, 0] if ids.numel() else ids
    return map_to_slots(ids, ep.log2phy.to(ids.device), ep.replicas.to(ids.device), offset=ep.rank)


@dataclass
class Routed:
    """Bookkeeping between dispatch and combine."""

    recv: torch.Tensor  # [N, H] received rows grouped by local slot
    counts: torch.Tensor  # [S_local] rows per local slot
    order: torch.Tensor  # [T*k] pair index of each sent row
    regroup: torch.Tensor  # [N] received row of each grouped row
    send_splits: list[int]
    recv_splits: list[int]
    shape: tuple[int, int]  # (T, k)


def _all_to_all(out, inp, out_splits, in_splits, group, async_op=False):
    if group is None:
        out.copy_(inp)
        return None
    return dist.all_to_all_single(out, inp, out_splits, in_splits, group=group, async_op=async_op)


def exchange_counts(slots: torch.Tensor, ep: EPGroup) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(pair order sorted by slot [T*k], counts sent per slot [S], counts received [W, S_local])."""
    flat = slots.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=len(ep.phy2log))  # [S]
    mine = ep.slots_per_rank[ep.rank]
    recv = torch.empty(ep.size * mine, dtype=counts.dtype, device=counts.device)
    _all_to_all(recv, counts, [mine] * ep.size, ep.slots_per_rank, ep.group)
    return order, counts, recv.view(ep.size, mine)


def dispatch(x: torch.Tensor, slots: torch.Tensor, ep: EPGroup, async_op: bool = False):
    """Send each token-expert pair's row to the rank of its slot. x [T, H], slots [T, k].

    Returns (Routed, work): `work` is the pending all-to-all when async_op (wait, then `finish`)."""
    t, k = slots.shape
    order, counts, recv_counts = exchange_counts(slots, ep)
    send_splits = [int(counts[ep.bounds[i]:ep.bounds[i + 1]].sum()) for i in range(ep.size)]
    recv_splits = recv_counts.sum(1).tolist()
    rows = permute(x, torch.div(order, k, rounding_mode="floor"))  # [T*k, H]
    recv = x.new_empty(sum(recv_splits), x.shape[1])
    work = _all_to_all(recv, rows, recv_splits, send_splits, ep.group, async_op)
    mine = recv_counts.shape[1]
    slot_of_row = torch.repeat_interleave(torch.arange(mine, device=x.device).repeat(ep.size),
                                          recv_counts.reshape(-1))
    regroup = torch.argsort(slot_of_row, stable=True)
    return Routed(recv, recv_counts.sum(0), order, regroup, send_splits, recv_splits, (t, k)), work


def grouped_rows(routed: Routed) -> torch.Tensor:
    """Received rows reordered by local slot (after the dispatch has landed)."""
    return permute(routed.recv, routed.regroup)


def combine(y: torch.Tensor, routed: Routed, weights: torch.Tensor, ep: EPGroup) -> torch.Tensor:
    """Return expert outputs y [N, H] (grouped order) to their tokens and sum them with the
    routing weights [T, k] -> [T, H]."""
    back = torch.empty_like(y)
    back[routed.regroup] = y  # received (source-rank) order
    out = y.new_empty(sum(routed.send_splits), y.shape[1])
    _all_to_all(out, back, routed.send_splits, routed.recv_splits, ep.group)
    return finish_combine(out, routed, weights)


def finish_combine(out: torch.Tensor, routed: Routed, weights: torch.Tensor) -> torch.Tensor:
    t, k = routed.shape
    pos = torch.empty_like(routed.order)
    pos[routed.order] = torch.arange(len(routed.order), device=out.device)  # row of each pair
    return unpermute(out, pos.view(t, k), weights)


def moe_local(x, ids, weights, experts, ep: EPGroup, timer) -> torch.Tensor:
    """EP1: routed experts of one MoE layer in this process, no all-to-all: x [T, H], ids/weights
    [T, k] -> [T, H]; the permute into expert order and the unpermute are timed as moe.route."""
    t, k = ids.shape
    with timer.section("moe.route"):
        flat = to_slots(ids, ep).reshape(-1)  # [T*k]
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=len(ep.phy2log))  # [S]
        rows = permute(x, torch.div(order, k, rounding_mode="floor"))  # [T*k, H]
    with timer.section("moe.experts"):
        y = experts(rows, counts)
    with timer.section("moe.route"):
        pos = torch.empty_like(order)
        pos[order] = torch.arange(len(order), device=x.device)  # row of each pair
        return unpermute(y, pos.view(t, k), weights)


def moe_forward(x, ids, weights, experts, ep: EPGroup, timer) -> torch.Tensor:
    """Routed experts of one MoE layer across the EP group: x [T, H], ids/weights [T, k] -> [T, H]."""
    if ep.group is None:
        return moe_local(x, ids, weights, experts, ep, timer)
    with timer.section("moe.dispatch", comm=True):
        routed, _ = dispatch(x, to_slots(ids, ep), ep)
        rows = grouped_rows(routed)
    with timer.section("moe.experts"):
        y = experts(rows, routed.counts)
    with timer.section("moe.combine", comm=True):
        return combine(y, routed, weights, ep)


def _rank_in_slot(flat_sorted: torch.Tensor) -> torch.Tensor:
    """For sorted slot ids [N]: each entry's index among the equal entries before it."""
    idx = torch.arange(flat_sorted.numel(), device=flat_sorted.device)
    first = torch.ones_like(flat_sorted, dtype=torch.bool)
    first[1:] = flat_sorted[1:] != flat_sorted[:-1]
    return idx - torch.cummax(torch.where(first, idx, torch.zeros_like(idx)), dim=0).values


def _bmm(x, w):
    """[S, M, K] x [S, K, N] (a weight stack, or FP8 weights per slot)."""
    return w.batched(x) if hasattr(w, "batched") else torch.bmm(x, w)


def moe_forward_static(x, ids, weights, experts, ep: EPGroup, timer, capacity: int) -> torch.Tensor:
    """Routed experts with device-side sizes only: x [T, H], ids/weights [T, k] -> [T, H].
    Needs equal slots per rank and T <= capacity."""
    t, k = ids.shape
    s_all, w, h = len(ep.phy2log), ep.size, x.shape[1]
    s_loc = s_all // w
    with timer.section("moe.dispatch", comm=True):
        flat = to_slots(ids, ep).reshape(-1)  # [T*k]
        order = torch.argsort(flat, stable=True)
        srt = flat[order]
        pos = _rank_in_slot(srt)  # [T*k] row of each pair in its slot's block
        send = x.new_zeros(s_all, capacity, h)
        send[srt, pos] = x[torch.div(order, k, rounding_mode="floor")]
        counts = torch.bincount(flat, minlength=s_all)  # [S]
        recv_counts = torch.empty_like(counts)
        recv = torch.empty_like(send)
        _all_to_all(recv_counts, counts, None, None, ep.group)  # [W * S_local]: from each source
        _all_to_all(recv, send, None, None, ep.group)  # [W * S_local, C, H]
        rows = recv.view(w, s_loc, capacity, h).transpose(0, 1).reshape(s_loc, w * capacity, h)
    with timer.section("moe.experts"):
        experts.rows = experts.rows + recv_counts.sum()  # a device count, read after the step
        gate, up = _bmm(rows, experts.w13).chunk(2, dim=-1)  # [S_local, W*C, I] each
        y = _bmm(torch.nn.functional.silu(gate) * up, experts.w2)  # [S_local, W*C, H]
    with timer.section("moe.combine", comm=True):
        back = torch.empty_like(send)
        _all_to_all(back, y.view(s_loc, w, capacity, h).transpose(0, 1).contiguous(), None, None, ep.group)
        pair_rows = torch.empty(t * k, h, dtype=x.dtype, device=x.device)
        pair_rows[order] = back[srt, pos]  # [T*k, H] in pair order
        return (pair_rows.view(t, k, h).float() * weights[..., None].float()).sum(1).to(x.dtype)


def moe_forward_dbo(x, ids, weights, experts, ep: EPGroup, timer) -> torch.Tensor:
    """Dual-batch overlap: two micro-batches (token halves); while one half's experts run, the
    other half's all-to-all is in flight. Timed sections count only the exposed waits as
    dispatch/combine."""
    half = x.shape[0] // 2
    parts = [(x[:half], ids[:half], weights[:half]), (x[half:], ids[half:], weights[half:])]
    with timer.section("moe.dispatch", comm=True):
        launched = [dispatch(px, to_slots(pi, ep), ep, async_op=True) for px, pi, _ in parts]
    outs, pending = [], []
    for (routed, work), (_, _, pw) in zip(launched, parts, strict=True):
        with timer.section("moe.dispatch", comm=True):
            if work is not None:
                work.wait()
        with timer.section("moe.experts"):
            y = experts(grouped_rows(routed), routed.counts)
            back = torch.empty_like(y)
            back[routed.regroup] = y
        out = y.new_empty(sum(routed.send_splits), y.shape[1])
        work = _all_to_all(out, back, routed.send_splits, routed.recv_splits, ep.group, async_op=True)
        pending.append((out, routed, pw, work))
    with timer.section("moe.combine", comm=True):
        for out, routed, pw, work in pending:
            if work is not None:
                work.wait()
            outs.append(finish_combine(out, routed, pw))
    return torch.cat(outs, 0)


def world_info() -> dict:
    """Backend facts for the records (NCCL version when there is one)."""
    info = {"torch": torch.__version__}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = "none"
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        try:
            v = torch.cuda.nccl.version()
            info["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - a missing NCCL is recorded, not fatal
            info["nccl"] = "none"
    else:
        info["nccl"] = "none"
    return info
