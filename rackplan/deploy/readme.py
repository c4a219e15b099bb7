"""launch/README.md: what each generated file is and how to run them, in order."""
from __future__ import annotations

from rackplan.specs import plan_hash

from . import fabric, flaglist
from .engine import Context
from .placement import Placement
from .scripts import host_var, rank_routing

FILES = {
    "env.sh": "model and host addresses every script reads (edit first)",
    "router.sh": "vllm-router in front of the instances",
    "bench.sh": "`vllm bench serve` at the planned load, saving the detailed result JSON",
    "bench_trace.jsonl": "the planned requests (arrival ms, input/output tokens, prefix hash ids)",
    "k8s/modelserver.yaml": "llm-d wide-EP LeaderWorkerSets, one per planned layout (and the ComputeDomain "
                            "of an NVL72 plan)",
    "k8s/inferencepool.values.yaml": "Helm values of the llm-d InferencePool (scheduler) for these pods",
    "dynamo/graph.yaml": "NVIDIA Dynamo DynamoGraphDeployment (and the ComputeDomain of an NVL72 plan)",
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
            "`k8s/inferencepool.values.yaml` (llm-d wide-ep-lws guide), or apply `dynamo/graph.yaml` "
            "(NVIDIA Dynamo); launch/README.md lists what each target leaves you to fill in.")


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


def _fabric_fill(cx: Context, pl: Placement, k8s: bool) -> list[str]:
    """The fabric values a target leaves to the operator (fabric.py OPERATOR, the RDMA resource)."""
    if not any(fabric.settings(cx.hw, cx.plan, inst.multi_host) for inst in pl.instances):
        return []
    where = "the pods' env" if k8s else "`env.sh`"
    out = [f"- `{v}` in {where}: {fabric.OPERATOR[v][1]} (default `{fabric.OPERATOR[v][0]}`)"
           for v in fabric.operators(cx.hw)]
    if k8s and cx.hw.fabric == "infiniband":
        out.append(f"- the `{fabric.RDMA_RESOURCE[0]}` resource: {fabric.RDMA_RESOURCE[1]}")
    if cx.hw.fabric == "mnnvl":
        out.append("- the NVIDIA DRA driver for GPUs in the cluster (the manifest's ComputeDomain gives each pod its "
                   "IMEX channel)" if k8s else "- the IMEX service (nvidia-imex) on every tray, configured with the "
                   "rack's trays: multi-node NVLink needs an IMEX channel")
    return out


def fill_in(target: str, pl: Placement, cx: Context) -> list[str]:
    """What the operator still has to supply for `target`, one line each."""
    if target == "scripts":
        out = [f"- `env.sh`: the address of each host `{host_var(0)}` .. `{host_var(pl.num_hosts - 1)}` "
               "(and `MODEL` to serve a local copy of the weights)"]
        out += _fabric_fill(cx, pl, False)
        if rank_routing(pl, cx) > 1:
            out.append("- `VLLM_API_KEY` in the environment of every host script and router.sh (one secret)")
        return out
    secret = "llm-d-hf-token" if target == "llm-d" else "hf-token-secret"
    image = "the `vllm/vllm-openai` image tag" if target == "llm-d" else "the `ai-dynamo/vllm-runtime` image tag"
    out = [f"- the Secret `{secret}` (key `HF_TOKEN`) in the namespace you apply to",
           f"- {image} if you run another build than the one the flags were checked against"]
    out += _fabric_fill(cx, pl, True)
    out.append("- `ROUTER_HOST` (and `ROUTER_PORT`) for bench.sh: the " +
               ("gateway in front of the InferencePool" if target == "llm-d" else "Dynamo frontend service"))
    return out


STEPS = {
    "scripts": "Copy the folder to every host; run `./host-NN.sh` on host NN, then `./router.sh` on the router "
               "host, then `./bench.sh`.",
    "llm-d": "`kubectl apply -f k8s/modelserver.yaml`; install the llm-d InferencePool chart with "
             "`-f k8s/inferencepool.values.yaml` (llm-d wide-ep-lws guide); then `./bench.sh`.",
    "dynamo": "`kubectl apply -f dynamo/graph.yaml` (Dynamo operator installed); then `./bench.sh`.",
}


def readme(pl: Placement, cx: Context, names: list[str], targets: tuple[str, ...] = ("scripts",)) -> str:
    version = flaglist.header()[0].split(" CLI flags")[0]
    lines = [f"# Launch files for plan `{cx.plan.name}`", "",
             f"{cx.plan.summary}: {cx.model.name} ({cx.family.hf_id}) on {pl.num_hosts} hosts of "
             f"{pl.gpus_per_host} x {cx.hw.name}; plan hash `{plan_hash(cx.plan)}`. Every flag and value is checked "
             f"against {version}'s CLI (rackplan/deploy/vllm_flags.txt).", "", "| file | what |", "|---|---|"]
    for name in names + ["README.md"]:
        what = FILES.get(name, "this host's vLLM processes" if name.startswith("host-") else "")
        lines.append(f"| `{name}` | {what} |")
    for target in targets:
        lines += ["", f"## {target}: what you fill in", ""] + fill_in(target, pl, cx) + ["", STEPS[target]]
    lines += ["", "bench.sh saves `results/bench.json`; `rackplan calibrate --vllm-bench results/bench.json --plan "
              "PLAN.yaml --out profile.yaml` fits a profile from it.", "", "## Instances", ""]
    return "\n".join(lines + _instances(pl, cx) + [""])
