"""launch/README.md: what each generated file is and how to run them, in order."""
from __future__ import annotations

from rackplan.specs import plan_hash

from . import flaglist
from .engine import Context
from .placement import Placement
from .scripts import host_var

FILES = {
    "env.sh": "model and host addresses every script reads (edit first)",
    "router.sh": "vllm-router in front of the instances",
    "bench.sh": "`vllm bench serve` at the planned load, saving the detailed result JSON",
    "bench_trace.jsonl": "the planned requests (arrival ms, input/output tokens, prefix hash ids)",
    "k8s/modelserver.yaml": "llm-d wide-EP LeaderWorkerSets, one per planned layout",
    "k8s/inferencepool.values.yaml": "Helm values of the llm-d InferencePool (scheduler) for these pods",
    "README.md": "this file",
}


def how_to_run(plan_file: str = "plan.yaml") -> str:
    """The paragraph report.md shows: the order to run the launch files in."""
    return ("Edit `launch/env.sh` (one address per host), copy the folder to every host and run "
            "`./host-NN.sh` on host NN; when they are up, run `./router.sh` on the router host and "
            "`./bench.sh` from anywhere that reaches it. bench.sh replays the planned requests at the planned "
            "load and saves `results/bench.json`; `rackplan calibrate --vllm-bench results/bench.json --plan "
            f"{plan_file} --out profile.yaml` fits a profile from it and `rackplan validate --plan {plan_file} "
            "--vllm-bench results/bench.json --profile profile.yaml` shows the error before and after. On "
            "Kubernetes, apply `k8s/modelserver.yaml` and install the InferencePool chart with "
            "`k8s/inferencepool.values.yaml` (llm-d wide-ep-lws guide).")


def _instances(pl: Placement, cx: Context) -> list[str]:
    rows = ["| instance | layout | hosts | GPUs per host | port | DBO thresholds (decode / prefill tokens) |",
            "|---|---|---|---|---:|---|"]
    for inst in pl.instances:
        lay = inst.layout
        hosts = ", ".join(host_var(s.host) for s in inst.slices)
        dbo = "-"
        if lay.dbo and lay.ep_size > 1:
            dbo = f"{lay.dbo_decode_token_threshold} / {lay.dbo_prefill_token_threshold}"
        rows.append(f"| {inst.name} | {lay.tag} {lay.role} | {hosts} | {len(inst.slices[0].gpus)} | "
                    f"{inst.port} | {dbo} |")
    return rows


def readme(pl: Placement, cx: Context, names: list[str]) -> str:
    version = flaglist.header()[0].split(" CLI flags")[0]
    lines = [f"# Launch files for plan `{cx.plan.name}`", "",
             f"{cx.plan.summary}: {cx.model.name} ({cx.family.hf_id}) on {pl.num_hosts} hosts of "
             f"{pl.gpus_per_host} x {cx.hw.name}; plan hash `{plan_hash(cx.plan)}`. Every flag is checked "
             f"against {version}'s CLI (rackplan/deploy/vllm_flags.txt).", "", "| file | what |", "|---|---|"]
    for name in names + ["README.md"]:
        what = FILES.get(name, "this host's vLLM processes" if name.startswith("host-") else "")
        lines.append(f"| `{name}` | {what} |")
    lines += ["", "## How to run", "", how_to_run(), "", "## Instances", ""] + _instances(pl, cx) + [""]
    return "\n".join(lines)
