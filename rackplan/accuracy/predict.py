"""Predict one benchmark case under one profile: the simulator, or the cost model's step time.

`simulate` cases run the real simulator and read the metric off its SimResult (closed-loop runs
measure over the whole run, as `vllm bench serve` does: `rates_per_gpu`). `prefill_step` / `decode_step` cases price
one step of one instance with the cost model (sim.cost.step), the way a per-phase test with the
other phase unlimited measures it: tokens per step / step seconds, per GPU of the instance.
"""
from __future__ import annotations

from dataclasses import replace

from rackplan.sim.cost.step import CostContext, StepCost, decode_step, op_layers, prefill_step
from rackplan.sim.search import whatif
from rackplan.sim.simulator import simulate_specs
from rackplan.specs import Plan, Profile, SpecError

from .cases import Case, CaseSide, resolve


def predict(case: Case, prof: Profile, seed: int, num_requests: int | None = None) -> float:
    """The case's predicted value (a ratio of two predictions for ratio cases)."""
    if case.ratio is not None:
        num = _side(case, prof, seed, case.ratio.numerator, num_requests)
        return num / _side(case, prof, seed, case.ratio.denominator, num_requests)
    return _side(case, prof, seed, None, num_requests)


def _side(case: Case, prof: Profile, seed: int, overrides: dict | None, num_requests: int | None) -> float:
    sc = resolve(case, overrides)
    if sc.whatif:  # `rackplan whatif` keys on this side (e.g. host.prepare_scale)
        specs = whatif.changed_specs(sc.scenario(prof), sc.whatif)
        sc = replace(sc, model=specs.model, hw=specs.hw, workload=specs.workload, plan=specs.plan)
        prof = specs.profile
    if case.method == "simulate":
        return _simulated(case, sc, prof, seed, num_requests or case.num_requests)
    return _stepped(case, sc, prof)


def _bad(case: Case, field: str, expected: str, got=None) -> SpecError:
    return SpecError(f"case {case.id}", field, expected, got) if got is not None else \
        SpecError(f"case {case.id}", field, expected)


def prefill_chunks(case: Case, sc: CaseSide) -> list[float]:
    """A rank's prompts for one step: full prompts of the workload's ISL, then one partial chunk."""
    if sc.workload is None or sc.workload.isl.kind != "fixed":
        raise _bad(case, "workload.isl", "a fixed ISL for prefill_step")
    isl, budget = sc.workload.isl.value, sc.tokens_per_rank
    full, rest = divmod(budget, isl)
    return [float(isl)] * full + ([float(rest)] if rest else [])


def _stepped(case: Case, sc: CaseSide, prof: Profile) -> float:
    lay, metric = sc.instance, case.metric
    skew = sc.workload.routing_skew if sc.workload is not None else 0.0
    cx = CostContext(sc.model, sc.hw, lay, prof, skew)
    if case.method == "prefill_step":
        step = prefill_step(cx, prefill_chunks(case, sc))
        tokens, kinds = float(sc.tokens_per_rank * lay.dp), ("input", "total")
    else:
        b = float(sc.batch_per_rank)
        step = decode_step(cx, b, b * sc.context_tokens)
        accepted = lay.tokens_per_step
        tokens, kinds = b * lay.dp * accepted, ("output", "total")
    if metric.quantity == "throughput":
        if metric.tokens not in kinds or metric.pool != "instance":
            raise _bad(case, "metric", f"tokens {' or '.join(kinds)} over pool 'instance' for {case.method}")
        return tokens / step.seconds / lay.gpus
    return _step_quantity(case, sc, step)


def _step_quantity(case: Case, sc: CaseSide, step: StepCost) -> float:
    q = case.metric.quantity
    if q == "step_s":
        return step.seconds
    if q == "op_s_per_layer":  # `a+b`: the per-layer times of several ops summed (e.g. a fused kernel)
        total = 0.0
        for name in case.metric.op.split("+"):
            sec = sum(op.seconds for op in step.ops if op.name == name)
            if sec <= 0:
                raise _bad(case, "metric.op", "ops the step prices, joined by +", name)
            total += sec / op_layers(sc.model, name)
        return total
    raise _bad(case, "metric.quantity", f"throughput, step_s or op_s_per_layer for {case.method}", q)


def _pool_gpus(case: Case, plan: Plan) -> int:
    pool = case.metric.pool
    if pool == "all":
        return plan.gpus_used
    if pool == "prefill" and plan.prefill:
        return sum(lay.total_gpus for lay in plan.prefill)
    if pool == "decode" and plan.decode:
        return sum(lay.total_gpus for lay in plan.decode)
    raise _bad(case, "metric.pool", "all, or a pool the plan has (prefill, decode)", pool)


def rates_per_gpu(m: dict, closed_loop: bool) -> dict[str, float]:
    """Input, output and total tok/s per GPU of a run's metrics. Closed loop: over the whole run,
    first arrival to last finish, as `vllm bench serve` reports them (total tokens / benchmark
    duration, ramp-up and drain included); open loop: over the steady-state window."""
    if closed_loop:
        per_gpu_s = m["duration_s"] * m["num_gpus"]
        inp, out = m["input_tokens"] / per_gpu_s, m["output_tokens"] / per_gpu_s
    else:
        inp, out = m["input_tps_per_gpu"], m["output_tps_per_gpu"]
    return {"input": inp, "output": out, "total": inp + out}


def _simulated(case: Case, sc: CaseSide, prof: Profile, seed: int, num_requests: int) -> float:
    res = simulate_specs(sc.scenario(prof), num_requests, seed)
    m, metric = res.metrics, case.metric
    if metric.quantity == "throughput":
        per_gpu = rates_per_gpu(m, sc.workload.arrival.kind == "concurrency")[metric.tokens]
        return per_gpu * m["num_gpus"] / _pool_gpus(case, sc.plan)
    key = {"tpot_p50_s": "tpot_p50_s", "tps_per_user": "tps_per_user", "step_s": "itl_p50_s"}.get(metric.quantity)
    if key is None:
        raise _bad(case, "metric.quantity", "throughput, tpot_p50_s, tps_per_user or step_s for simulate",
                   metric.quantity)
    return m[key]
