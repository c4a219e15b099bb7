"""TP over gloo equals the single-process model: attention head-sharded with an all-reduce after
the output projection, FFNs and experts TP-sharded, next to DEP (fp32, rtol 1e-5)."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from rackplan.executor.attention import sub_seed
from rackplan.executor.model import Batch, Model, layer_ids
from rackplan.executor.parallel import make_ep_group
from rackplan.executor.shard import build_shard
from rackplan.executor.timing import NullTimer
from rackplan.executor.topology import InstanceSpec, make_groups
from rackplan.specs import Layout, load_model

from .exec_harness import run_ranks

pytestmark = pytest.mark.integration
SPEC = load_model("tiny-moe")
SEED, PROMPT, STEPS = 3, [13, 6], 2  # prompt lengths of the two sequences of each DP replica


def _tokens(dp_rank: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(sub_seed(SEED, "tp-test", dp_rank))
    return torch.randint(0, SPEC.vocab_size, (sum(PROMPT) + STEPS * len(PROMPT),), generator=gen)


def _run(model: Model, toks: torch.Tensor) -> list[torch.Tensor]:
    """Prefill both prompts, then STEPS decode steps feeding fixed tokens: logits of every step."""
    cache = model.kv_cache(len(PROMPT), max(PROMPT) + STEPS + 1)
    slots = torch.arange(len(PROMPT))
    out = [model.forward(Batch.prefill(toks[:sum(PROMPT)], PROMPT, slots), cache, NullTimer())]
    for i in range(STEPS):
        nxt = toks[sum(PROMPT) + i * len(PROMPT):sum(PROMPT) + (i + 1) * len(PROMPT)]
        out.append(model.forward(Batch.decode(nxt, [p + i for p in PROMPT], slots), cache, NullTimer()))
    return out


def _rank(rank, world, dp, tp, ep):
    inst = InstanceSpec("decode[0].0", "decode", Layout("decode", dp=dp, tp=tp, ep=ep), 0)
    rg = make_groups([inst], rank)[inst.name]
    model = build_shard(SPEC, SEED, "cpu", torch.float32, rg, "decode")
    moe = model.layers[-1]
    shapes = (moe.attn.heads, moe.attn.w["o"].shape[0], moe.experts.w13.shape, moe.shared.w2.shape[0],
              model.head.shape[1])
    return rg.dp_rank, _run(model, _tokens(rg.dp_rank)), shapes


@pytest.mark.parametrize("dp,tp,ep", [
    (1, 2, 2),  # TP2 attention, experts EP2 (each TP rank dispatches half the tokens)
    (1, 2, 1),  # TP2 attention, experts TP2 (every expert split over both ranks)
    (2, 2, 4),  # TP2 x DEP2: two attention replicas of TP2, experts EP4
    (2, 2, 2),  # TP2 x DEP2 with expert TP2 x EP2
])
def test_tp_layers_equal_single_process_reference(tmp_path, dp, tp, ep):
    outs = run_ranks(_rank, dp * tp, tmp_path, dp, tp, ep)
    ref = Model(SPEC, SEED, "cpu", torch.float32, make_ep_group(None, 0, 1, SPEC.moe.num_experts),
                layer_ids(SPEC, "decode"))
    a, m = SPEC.attention, SPEC.moe
    moe_tp = dp * tp // ep
    for dp_rank, got, shapes in outs:  # this rank holds only its shard
        assert shapes == (a.num_heads // tp, a.num_heads * a.v_head_dim // tp,
                          (m.num_experts // ep, SPEC.hidden_size, 2 * m.expert_intermediate // moe_tp),
                          m.expert_intermediate // tp, SPEC.vocab_size // tp)
        want = _run(ref, _tokens(dp_rank))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def _allreduce_timed(rank, world):
    from rackplan.executor.timing import StepTimer
    inst = InstanceSpec("prefill[0].0", "prefill", Layout("prefill", dp=1, tp=2), 0)
    rg = make_groups([inst], rank)[inst.name]
    model = build_shard(SPEC, SEED, "cpu", torch.float32, rg, "prefill")
    timer = StepTimer("cpu", rg.ep)
    model.forward(Batch.prefill(_tokens(0)[:9], [9]), None, timer)
    dist.barrier()
    return timer.collect()


def test_tp_collectives_are_timed_as_their_own_op(tmp_path):
    for sec in run_ranks(_allreduce_timed, 2, tmp_path):
        assert sec["attn.allreduce"] > 0 and sec["ffn.allreduce"] > 0
        assert {"attn.proj", "moe.dispatch", "moe.experts"} <= sec.keys()
