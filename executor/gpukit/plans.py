"""Replay plans for one lent GPU: what `execute` replays there, each passing execute's own checks.

The executor runs bf16 weights in these replays (FP8 would run only the GEMMs FP8, at per-row scales,
not the checkpoint's block or MX formats), so each plan names a bf16 copy of the model: every weight,
cache and message dtype bf16, cache entries twice their FP8 bytes. The records then say `weights: bf16`
and `rackplan validate` prices what ran. A plan is one instance per role on the GPU's own hardware
(h100-sxm / h200-sxm, whose shipped profile applies) at the smallest DEP size that divides the experts
and fits that GPU's memory with the whole model (execute's HBM check), replayed on the one GPU at
plan rank 0's per-rank shapes with 1 dense + 2 MoE layers (--max-dense-layers / --max-moe-layers:
the records say how many layers ran).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from rackplan.specs import CONFIG_DIR, SpecError

MODELS = ("deepseek-v3", "deepseek-v4.1-flash")  # the kit's models (the V3 and V4.1 per-rank shapes)
PREFILL_TOKENS = 4096  # per rank and step: a chunked-prefill budget (vLLM's default max_num_batched_tokens 8192
#                        halved so a 2-layer replay stays well inside the call; the records give the shape)
DECODE_BATCH = 64      # sequences per decode rank (the shipped replay plans' decode batch)
LAYERS = ("--max-dense-layers", "1", "--max-moe-layers", "2")  # the per-rank slice that runs
WORKLOAD = "isl4k-osl1k"
REHEARSAL = {"tokens": 32, "batch": 4}  # the CPU rehearsal's per-rank prefill tokens and decode batch


@dataclass(frozen=True)
class Replay:
    """One planned replay: the plan file, the execute arguments after --plan, what it stands for."""
    name: str
    plan: Path
    args: tuple[str, ...]
    dep: int
    note: str


def bf16_model(name: str, out: Path, tiny: str | None = None) -> Path:
    """A copy of embedded model `name` with every dtype bf16 (what the replay runs), written to out/."""
    d = yaml.safe_load((CONFIG_DIR / "models" / f"{name}.yaml").read_text())
    d["name"] = f"{name}-bf16"
    d["source"] = f"{name} with every dtype bf16: what the executor's GPU replay runs (rackplan gpukit)"
    d["dtypes"] = {k: "bf16" for k in d["dtypes"] if k != "expert_compute"}
    for kv in d["attention"]["kv"]:
        kv["entry_bytes"] = kv["entry_bytes"] * 2  # FP8 cache entries -> bf16
        if "indexer_key_bytes" in kv:
            kv["indexer_key_bytes"] = kv["indexer_key_bytes"] * 2
    if d.get("draft"):
        d["draft"]["weight_dtype"] = "bf16"
    path = out / f"{name}-bf16.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def standin(name: str, out: Path) -> Path:
    """The CPU rehearsal's stand-in for model `name`: tiny-moe's sizes (a few MB of weights) with `name`'s
    expert count and top-k (so the same DEP sizes divide it) and its attention kind (V4.1: csa with one
    KV head and a band of window 4 + topk 2), written to out/."""
    real = yaml.safe_load((CONFIG_DIR / "models" / f"{name}.yaml").read_text())
    d = yaml.safe_load((CONFIG_DIR / "models" / "tiny-moe.yaml").read_text())
    d["name"] = f"tiny-{name}"
    d["source"] = f"rehearsal stand-in: tiny-moe with {name}'s experts, top-k and attention kind"
    d["moe"].update(num_experts=real["moe"]["num_experts"], top_k=real["moe"]["top_k"])
    if real["attention"]["kind"] == "csa":
        lat = d["attention"]["kv"][0]
        kv = [dict(lat, name="swa", window=4), dict(lat, name="shared_latent", topk=2)]
        d["attention"] = {"kind": "csa", "num_heads": 4, "head_dim": 32, "num_kv_heads": 1, "q_lora_rank": 64,
                          "o_lora_rank": 32, "o_groups": 2, "qk_rope_head_dim": 16, "kv": kv}
    path = out / f"tiny-{name}.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def _plan(out: Path, name: str, model: Path, hw: str, dep: int, tokens: int = PREFILL_TOKENS,
          batch: int = DECODE_BATCH) -> Path:
    d = {"name": name, "model": str(model.resolve()), "hardware": hw, "num_gpus": 2 * dep, "workload": WORKLOAD,
         "description": f"{model.stem} per-rank replay on {hw}: prefill DEP{dep} ({tokens} tokens per rank), "
                        f"decode DEP{dep} (batch {batch}); one GPU runs plan rank 0 with 1 dense + 2 MoE layers",
         "prefill": [{"role": "prefill", "dp": dep, "max_tokens_per_step": tokens, "max_batch_per_rank": 4,
                      "cuda_graphs": False}],
         "decode": [{"role": "decode", "dp": dep, "max_batch_per_rank": batch, "max_tokens_per_step": batch,
                     "cuda_graphs": True}]}
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def execute_args(plan: Path, out: Path, device: str, steps: int) -> list[str]:
    """The `rackplan execute` arguments of one replay (everything after `execute`)."""
    return ["--plan", str(plan), "--device", device, "--ranks", "1", "--steps", str(steps), "--warmup", "2",
            *LAYERS, "--timeout", "200", "--out", str(out)]


def passes_execute_checks(args: list[str]) -> str | None:
    """None when `rackplan execute ARGS` passes execute's own plan checks (command.check_plan: HBM fit,
    experts over EP ranks, TP widths, --ranks), else the refusal's line."""
    import argparse

    from rackplan.executor.command import add_arguments, check_plan
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    try:
        check_plan(parser.parse_args(args))
    except SpecError as exc:
        return str(exc)
    return None


def plan_replays(hw: str, out: Path, device: str = "cuda", steps: int = 5,
                 rehearse: bool = False) -> tuple[list[Replay], list[str]]:
    """For each of MODELS the smallest DEP size (a divisor of its experts) whose plan passes execute's
    checks on `hw`; (replays, one line per refused candidate). `rehearse`: the DEP sizes chosen as for
    the GPU, planned again at the rehearsal's step shapes (REHEARSAL) on the models' tiny stand-ins."""
    from rackplan.specs import load_model
    out.mkdir(parents=True, exist_ok=True)
    replays, refused = [], []
    for name in MODELS:
        model = bf16_model(name, out)
        experts = load_model(model).moe.num_experts
        for dep in (d for d in range(2, experts + 1) if experts % d == 0):
            tag = f"{hw.split('-')[0]}-{'v3' if name == 'deepseek-v3' else 'v41'}-bf16-dep{dep}"
            plan = _plan(out, tag, model, hw, dep)
            args = execute_args(plan, out / "runs" / tag, device, steps)
            why = passes_execute_checks(args)
            if why is None:
                if rehearse:  # the same DEP size at the rehearsal's step shapes, on the stand-in
                    plan = _plan(out, tag, standin(name, out), hw, dep, **REHEARSAL)
                    args = execute_args(plan, out / "runs" / tag, device, steps)
                    why = passes_execute_checks(args)
                    if why is not None:
                        raise SpecError(str(plan), "model", "a stand-in that passes execute's checks", why)
                    note = f"rehearsal: tiny stand-in of {name}, DEP{dep} (the size planned for {hw})"
                else:
                    note = f"{name} bf16, DEP{dep} on {hw}, plan rank 0, 1 dense + 2 MoE layers"
                replays.append(Replay(tag, plan, tuple(args), dep, note))
                break
            refused.append(f"{tag}: {why}")
            plan.unlink()
        else:
            raise SpecError(hw, "hbm_bytes", f"room for {name} in bf16 at some DEP size dividing {experts} experts")
    return replays, refused
