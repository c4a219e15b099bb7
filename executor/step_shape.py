"""The shape of one step on one rank, as measurement records carry it (no torch import here).

One type for the three places a step's shape crosses: the executor writes it into every record of
a step (`executor/records.step_records`), the schema checks it (`executor/schema.py`), calibration
reads it back into the cost model's `RankWork` (`calibration/samples.py`).

Counts are per layer of one step on one rank:
  batch           sequences in the step (prompt chunks on a prefill step)
  tokens          query tokens (decode: batch x (1 + draft tokens); prefill: the chunks' new tokens)
  ctx_sum         sum over sequences of the context each attends over, its own query tokens included
  prefill_new     [chunks] new prompt tokens of each chunk (prefill steps only)
  prefill_prefix  [chunks] tokens of that prompt already cached before the chunk
  is_prefill      a prefill step (its lists are recorded even when this rank ran no chunk)
  instance        the serving instance's name (`pool[i].j`), where one ran the step
  dp_rank         the step's DP rank within its instance, where it differs from the global rank
  extra           everything else the writer records beside them (tokens_global, expert_tokens, eplb,
                  host_parts, spec_depth, ...): written as they are, read back as they were

Records written before this type carried the same keys as a dict; keys they lack read as 0 / empty
(a prefill record without `prefill_prefix`: no prefix), so old files still load.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from rackplan.sim.cost.batch import RankWork
from rackplan.specs import SpecError

CORE = ("batch", "tokens", "ctx_sum", "prefill_new", "prefill_prefix", "instance", "dp_rank")  # typed keys


@dataclass(frozen=True)
class StepShape:
    """What one rank ran in one step (see the module docstring for each field)."""

    batch: int = 0
    tokens: int = 0
    ctx_sum: int = 0
    prefill_new: tuple[int, ...] = ()
    prefill_prefix: tuple[int, ...] = ()
    instance: str | None = None
    dp_rank: int | None = None
    is_prefill: bool = False
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @staticmethod
    def decode(ctx: list[int], queries: int = 1) -> StepShape:
        """A decode step over sequences with contexts `ctx` (tokens before the step), `queries` query
        tokens each (1 + draft tokens under speculation)."""
        return StepShape(len(ctx), len(ctx) * queries, sum(c + queries for c in ctx))

    @staticmethod
    def prefill(new: list[int], prefix: list[int] | None = None) -> StepShape:
        """A prefill step of prompt chunks: `new` tokens each after `prefix` cached ones (default none)."""
        new = tuple(int(n) for n in new)
        pre = tuple(int(p) for p in prefix) if prefix is not None else (0,) * len(new)
        ctx = sum(n + p for n, p in zip(new, pre, strict=True))
        return StepShape(len(new), sum(new), ctx, new, pre, is_prefill=True)

    def with_extra(self, **extra) -> StepShape:
        """This shape with more keys recorded beside it (a core key given here replaces the field)."""
        core = {k: v for k, v in extra.items() if k in CORE}
        rest = {k: v for k, v in extra.items() if k not in CORE}
        return replace(self, **{k: tuple(v) if k.startswith("prefill_") else v for k, v in core.items()},
                       extra={**self.extra, **rest})

    def to_record(self) -> dict:
        """The record's `shape` mapping (JSON-ready; prefill lists only on prefill steps, instance and
        dp_rank only where set)."""
        out = {**self.extra, "batch": self.batch, "tokens": self.tokens, "ctx_sum": self.ctx_sum}
        if self.is_prefill:
            out.update(prefill_new=list(self.prefill_new), prefill_prefix=list(self.prefill_prefix))
        if self.instance is not None:
            out["instance"] = self.instance
        if self.dp_rank is not None:
            out["dp_rank"] = self.dp_rank
        return out

    @staticmethod
    def from_record(shape: dict, where: str = "shape") -> StepShape:
        """The shape a record carries; SpecError naming the key when a count is not a finite integer
        >= 0 or the prefill lists differ in length. Keys an older record lacks read as 0 / empty."""
        def count(key: str, val) -> int:
            if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val) or val < 0 \
                    or val != int(val):
                raise SpecError(where, f"shape.{key}", "an integer >= 0", val)
            return int(val)

        def counts(key: str) -> tuple[int, ...]:
            val = shape.get(key) or []
            if not isinstance(val, (list, tuple)):
                raise SpecError(where, f"shape.{key}", "a list of integers >= 0", val)
            return tuple(count(key, v) for v in val)

        new = counts("prefill_new")
        pre = counts("prefill_prefix") or (0,) * len(new)
        if len(pre) != len(new):
            raise SpecError(where, "shape.prefill_prefix", f"{len(new)} entries (one per prefill_new)", len(pre))
        inst = shape.get("instance")
        if inst is not None and not isinstance(inst, str):
            raise SpecError(where, "shape.instance", "an instance name", inst)
        dp = shape.get("dp_rank")
        return StepShape(count("batch", shape.get("batch", 0)), count("tokens", shape.get("tokens", 0)),
                         count("ctx_sum", shape.get("ctx_sum", 0)), new, pre, inst,
                         None if dp is None else count("dp_rank", dp), "prefill_new" in shape,
                         {k: v for k, v in shape.items() if k not in CORE})

    def to_rank_work(self) -> RankWork:
        """The cost model's work of this rank: decode sequences and their context sum, or the prompt
        chunks one by one (count 1, new tokens, prefix)."""
        if self.prefill_new:
            return RankWork(chunks=tuple((1.0, float(n), float(p))
                                         for n, p in zip(self.prefill_new, self.prefill_prefix, strict=True)))
        return RankWork(float(self.batch), float(self.ctx_sum))
