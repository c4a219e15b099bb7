"""The scalar step pricer against the vectorised one it replaced, and its two entry points.

tests/unit/data/step_oracle.json holds 240 random steps (every embedded model, DP 1-128, TP,
explicit EP, DBO, speculation, EPLB, fixed and sampled imbalance, skew, CUDA graphs, async
scheduling, fitted profiles) priced by the vectorised numpy cost model (make_step_oracle.py).
A step is a few distinct per-rank works, as the simulator's representative batches are.
"""
import json
from pathlib import Path

import pytest

from rackplan.sim.cost.step import RankWork, Step, step_cost

from .make_step_oracle import context, rank_batch

pytestmark = pytest.mark.unit
CASES = json.loads((Path(__file__).parent / "data" / "step_oracle.json").read_text())["cases"]


def representative(works) -> Step:
    """The works as the scalar path takes them: one RankWork per distinct work, identical chunks
    as one (count, new, prefix) group."""
    rws = tuple(RankWork(seqs, ctx, ((chunks, tokens, prefix),) if chunks else ())
                for _, seqs, ctx, chunks, tokens, prefix in works)
    return Step(rws, tuple(int(w[0]) for w in works))


def _close_ops(got: dict, want: dict, scale: float) -> list[str]:
    return [f"{k}: {got.get(k, 0.0)} != {want.get(k, 0.0)}" for k in sorted(set(got) | set(want))
            if abs(got.get(k, 0.0) - want.get(k, 0.0)) > 1e-9 * scale]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_scalar_path_matches_the_vectorised_oracle(i):
    case = CASES[i]
    cx = context(case)
    if cx.layout.ep_size == 1 and cx.model.num_moe_layers:
        pytest.skip("EP1 prices its local permute (moe.permute) since the executor merge: the old "
                    "vectorised model priced none, on purpose")
    cost = step_cost(cx, representative(case["works"]))
    assert cost.seconds == pytest.approx(case["seconds"], rel=1e-9)
    assert not _close_ops(cost.breakdown(), case["ops"], case["seconds"])


@pytest.mark.parametrize("i", range(0, len(CASES), 3))
def test_per_sequence_batch_equals_representative_step(i):
    """A RankBatch (per-rank arrays, one entry per chunk) reduces to the same formulas."""
    case = CASES[i]
    cx = context(case)
    per_seq = step_cost(cx, rank_batch(case["works"]))
    rep = step_cost(cx, representative(case["works"]))
    assert per_seq.seconds == pytest.approx(rep.seconds, rel=1e-12)
    assert not _close_ops(per_seq.breakdown(), rep.breakdown(), rep.seconds)


def test_halves_split_chunks_alternately():
    w = RankWork(5.0, 500.0, ((3, 100.0, 0.0), (2, 50.0, 10.0)))  # chunks 0-2 of 100, 3-4 of 50
    a, z = w.half(0), w.half(1)
    assert a == RankWork(2.5, 250.0, ((2, 100.0, 0.0), (1, 50.0, 10.0)))  # chunks 0, 2, 4
    assert z == RankWork(2.5, 250.0, ((1, 100.0, 0.0), (1, 50.0, 10.0)))  # chunks 1, 3
