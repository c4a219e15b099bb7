"""GPUStack's performance-lab runs (benchmarks/cases/gpustack-*.yaml) beside the simulator, metric by metric.

Each GPUStack figure is one `vllm bench serve --backend openai-chat --endpoint /v1/chat/completions
--dataset-name random` run, and the page prints the whole result block, not only the throughput the case
files take: benchmark duration, mean TTFT, mean TPOT and median ITL. Those separate two kinds of error:

- the median ITL is the price of the step most tokens wait on (a mixed step of an 8192-token prefill chunk
  and the running decodes when prefill is pending, a pure decode step when the KV cache is full), so
  published / simulated median ITL is the cost model's step error at the case's own shapes;
- duration / (steps it needs) beyond that, and a mean TTFT near the whole duration, is time outside the
  step (per-request work in the API server: the runs go through the chat endpoint, whose chat template
  the API server renders and tokenises per request).

Part 2 prices gpt-oss-120b's routed experts (`moe.experts`, per layer) the way a step does and prints them
beside the rows of the MXFP4 MoE kernel vLLM runs for gpt-oss on Hopper (aiconfigurator-core's vLLM 0.24.0
moe_perf table, moe_dtype w4a16_mxfp4, kernel vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic,
gpt-oss's own shape: hidden 2880, inter 2880, 128 experts, top-4). The profiles price these experts with the
BF16 kernel's curve at MXFP4 bytes (configs/profiles/h100-sxm-vllm.yaml fallbacks: experts.mxfp4_bf16).

Published figures: gpustack/gpustack docs/performance-lab/gpt-oss-120b/h100.md ("Other Benchmark Cases")
and docs/performance-lab/glm-4.6/h200.md (the vLLM baseline), transcribed below; tests/unit/
test_gpustack_published.py checks each against the case file's published throughput.

Run:  python benchmarks/gpustack_steps.py [--no-table]
"""
from __future__ import annotations

import argparse

import numpy as np

from rackplan.accuracy.cases import load_cases, resolve
from rackplan.accuracy.command import Profiles
from rackplan.sim.simulator import simulate_specs
from rackplan.specs import load_hardware

# case id -> (benchmark duration s, total input tokens, total generated tokens, mean TTFT ms, mean TPOT ms,
# median ITL ms), as printed in the page's result block for that run
PUBLISHED = {
    "gptoss-h100-tp1-random-128": (7.72, 127755, 4000, 4850.46, 304.80, 352.58),
    "gptoss-h100-tp2-random-128": (4.18, 127755, 4000, 2800.15, 183.05, 267.83),
    "gptoss-h100-tp1-random-2k": (72.87, 999120, 49197, 36234.76, 41.35, 14.92),
    "gptoss-h100-tp2-random-2k": (30.75, 999120, 49059, 15291.77, 139.32, 208.40),
    "gptoss-h100-tp1-random-4k": (145.04, 1999249, 67205, 72954.68, 31.70, 12.37),
    "gptoss-h100-tp2-random-4k": (59.94, 1999249, 68046, 29487.34, 164.73, 215.59),
    "gptoss-h100-tp1-random-32k": (198.92, 3200000, 9877, 99444.04, 23.99, 7.26),
    "gptoss-h100-tp2-random-32k": (98.86, 3200000, 9955, 48826.05, 220.32, 246.94),
    "glm46-h200-tp8-random-128": (13.89, 127881, 4000, 11467.27, 351.26, 389.46),
    "glm46-h200-tp8-random-2k": (60.96, 999429, 50000, 30215.66, 269.75, 402.36),
    "glm46-h200-tp8-random-4k": (125.61, 1999787, 99801, 57737.75, 205.69, 59.67),
    "glm46-h200-tp8-random-32k": (213.02, 3200000, 9406, 105089.84, 479.17, 529.63),
}
GPTOSS_SHAPE = (2880, 2880, 4, 128)  # hidden, inter, top-k, experts (configs/models/gpt-oss-120b.yaml)
TOKENS = (8, 64, 512, 2048, 8192, 16384)


def published_total_per_gpu(case_id: str, gpus: int) -> float:
    """Total token throughput per GPU of a transcribed run: (input + generated tokens) / duration / GPUs."""
    dur, inp, out = PUBLISHED[case_id][:3]
    return (inp + out) / dur / gpus


def run_side_by_side() -> None:
    profs = Profiles()
    print(f"{'case':28s} {'dur s pub/sim':>16s} {'TTFT s pub/sim':>16s} {'TPOT ms pub/sim':>18s} "
          f"{'ITL p50 ms pub/sim':>20s} {'ITL ratio':>9s}")
    for c in load_cases():
        if c.id not in PUBLISHED:
            continue
        sc = resolve(c)
        prof, _ = profs.for_case("default", load_hardware(c.hardware))
        res = simulate_specs(sc.scenario(prof), c.num_requests, 0)
        m = res.metrics
        dur, _, _, ttft, tpot, itl = PUBLISHED[c.id]
        s_ttft, s_tpot, s_itl = float(np.mean(res.ttft_s)), float(np.mean(res.tpot_s)) * 1e3, m["itl_p50_s"] * 1e3
        print(f"{c.id:28s} {dur:7.1f}/{m['duration_s']:<8.1f} {ttft / 1e3:7.1f}/{s_ttft:<8.1f} "
              f"{tpot:8.1f}/{s_tpot:<9.1f} {itl:9.1f}/{s_itl:<10.1f} {itl / s_itl:9.2f}")


def experts_per_layer(hw_name: str, tp: int, tokens: float) -> float:
    """moe.experts seconds per layer of gpt-oss-120b at TP `tp` (experts sharded tp ways), `tokens` prefill tokens,
    priced by a step of the hardware's default profile."""
    from rackplan.sim.cost.batch import RankWork, Step
    from rackplan.sim.cost.step import CostContext, step_cost
    from rackplan.specs import Layout, load_model

    model, hw = load_model("gpt-oss-120b"), load_hardware(hw_name)
    prof, _ = Profiles().for_case("default", hw)
    lay = Layout(role="both", dp=1, tp=tp, expert_parallel=False, max_tokens_per_step=16384)
    st = step_cost(CostContext(model, hw, lay, prof, 0.0), Step.uniform(1, RankWork(0.0, 0.0, ((1.0, tokens, 0.0),))))
    return sum(op.seconds for op in st.ops if op.name == "moe.experts") / model.num_moe_layers


def table_rows(system: str) -> tuple[dict[tuple[int, int], float], str] | None:
    """((moe_tp_size, num_tokens) -> seconds of the w4a16_mxfp4 rows at gpt-oss's shape, balanced, EP 1; the
    table's version), or None without the op database."""
    from rackplan.calibration.opdb import data_root, locate, read
    from rackplan.specs import SpecError

    try:
        t = locate(data_root(), system).get("moe_perf")
    except SpecError:
        return None
    if t is None:
        return None
    c = read(t)
    h, inter, topk, experts = GPTOSS_SHAPE
    sel = ((c["moe_dtype"] == "w4a16_mxfp4") & (c["distribution"] == "balanced") & (c["moe_ep_size"] == 1)
           & (c["hidden_size"] == h) & (c["inter_size"] == inter) & (c["topk"] == topk) & (c["num_experts"] == experts))
    out: dict[tuple[int, int], float] = {}
    for tp, n, s in zip(c["moe_tp_size"][sel], c["num_tokens"][sel], c["seconds"][sel]):
        key = (int(tp), int(n))
        out[key] = min(out.get(key, float("inf")), float(s))
    return out, t.version


def run_expert_table() -> None:
    for hw_name, system in (("h100-sxm", "h100_sxm"), ("h200-sxm", "h200_sxm")):
        got = table_rows(system)
        if not got:
            print(f"{system}: no op database installed (pip install 'rackplan[opdb]'); part 2 skipped")
            continue
        rows, version = got
        print(f"\ngpt-oss-120b moe.experts per layer, {hw_name} default profile / vLLM {version} w4a16_mxfp4 rows "
              "(us), ratio")
        print(f"{'TP':>3s} " + " ".join(f"{n:>18d}" for n in TOKENS))
        for tp in (1, 2):
            cells = []
            for n in TOKENS:
                priced = experts_per_layer(hw_name, tp, float(n)) * 1e6
                meas = rows.get((tp, n))
                cells.append(f"{priced:7.0f}/{meas * 1e6:<6.0f}{priced / (meas * 1e6):4.1f}x" if meas
                             else f"{priced:7.0f}/-")
            print(f"{tp:>3d} " + " ".join(f"{c:>18s}" for c in cells))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-table", action="store_true", help="skip part 2 (the MXFP4 expert kernel table)")
    args = p.parse_args()
    run_side_by_side()
    if not args.no_table:
        run_expert_table()


if __name__ == "__main__":
    main()
