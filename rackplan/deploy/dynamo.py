"""NVIDIA Dynamo target: one DynamoGraphDeployment (nvidia.com/v1beta1) running the plan's instances.

Follows the vLLM graphs Dynamo 1.6.1 ships (dynamo/profiler/templates/dgd/vllm/{agg,disagg}.yaml and
dynamo/profiler/utils/config.py, the model Dynamo's profiler writes graphs with): a `frontend`
component (OpenAI server + router, `python3 -m dynamo.frontend`), and per planned layout one worker
component (`python3 -m dynamo.vllm` with vLLM's engine arguments, `--disaggregation-mode prefill |
decode` in a disaggregated plan), `replicas` = planned instances and `multinode.nodeCount` = hosts per
instance (Dynamo's multinode deployment guide: the operator, through Grove or LWS, starts that many pods
per replica and supplies the multi-node launch settings; rackplan gives the DP size, not per-pod ranks:
not checked against a running operator). The engine flags, fabric
settings, resources, probes and volumes are the llm-d target's (engine.py, fabric.py, k8s.py); the
frontend routes with the plan's policy (policies.py). API-server flags stay out: Dynamo's frontend
replaces vLLM's.
"""
from __future__ import annotations

from .engine import Context, serve_flags
from .k8s import (
    CLAIM,
    channel_template,
    compute_domain,
    labels,
    needs_claim,
    object_name,
    pod_env,
    pod_resources,
    pod_volumes,
    volume_mounts,
)
from .placement import Instance, Placement
from .policies import policy
from .scripts import checked

IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"  # the runtime image of Dynamo's vLLM graphs
HTTP_PORT = 8000  # dynamo.frontend --http-port (Dynamo's templates)
MODE = {"prefill": "prefill", "decode": "decode"}  # --disaggregation-mode (aggregated: the default, agg)


def worker_args(inst: Instance, cx: Context) -> list[str]:
    """Arguments of `python3 -m dynamo.vllm` for one instance of `inst`'s layout (vLLM engine flags)."""
    lay = inst.layout
    words = ["--model", cx.family.hf_id, "--served-model-name", cx.family.hf_id]
    if inst.pool in MODE and cx.plan.disaggregated:
        words += ["--disaggregation-mode", MODE[inst.pool]]
    if lay.dp > 1:
        words += ["--data-parallel-size", str(lay.dp)]
    words += serve_flags(lay, cx)
    checked("vllm serve", ["vllm", "serve"] + [w for w in words if w != "--disaggregation-mode"
                                               and w not in MODE.values()])
    return words


def _worker(inst: Instance, cx: Context) -> dict:
    spec: dict = {"containers": [{
        "name": "main", "image": IMAGE, "command": ["python3", "-m", "dynamo.vllm"], "args": worker_args(inst, cx),
        "env": pod_env(inst, cx), "resources": pod_resources(inst, cx),
        "securityContext": {"capabilities": {"add": ["IPC_LOCK", "SYS_RAWIO"]}}, "volumeMounts": volume_mounts()}],
        "volumes": pod_volumes(cx)}
    if needs_claim(inst, cx):
        spec["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": channel_template(cx)}]
    comp = {"name": inst.name.rsplit("-", 1)[0], "type": "worker" if inst.pool == "aggregated" else inst.pool,
            "replicas": inst.layout.replicas, "podTemplate": {"metadata": {"labels": labels(cx, inst.pool)},
                                                              "spec": spec}}
    if inst.multi_host:
        comp["multinode"] = {"nodeCount": len(inst.slices)}
    return comp


def _frontend(cx: Context) -> dict:
    mode = policy(cx.plan.router).dynamo
    return {"name": "Frontend", "type": "frontend", "replicas": 1, "podTemplate": {"spec": {"containers": [{
        "name": "main", "image": IMAGE, "command": ["python3", "-m", "dynamo.frontend"],
        "args": ["--http-port", str(HTTP_PORT), "--router-mode", mode],
        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token-secret", "key": "HF_TOKEN"}}}],
        "ports": [{"containerPort": HTTP_PORT, "name": "http", "protocol": "TCP"}]}]}}}


def manifests(pl: Placement, cx: Context) -> list[dict]:
    """The ComputeDomain (NVL72 plans that need one) and the DynamoGraphDeployment."""
    firsts = [inst for inst in pl.instances if inst.name.endswith("-0")]
    workers = [_worker(inst, cx) for inst in firsts]
    graph = {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
             "metadata": {"name": object_name(cx, "dynamo", 63), "labels": labels(cx)},
             "spec": {"components": [_frontend(cx)] + workers}}
    claims = any("resourceClaims" in w["podTemplate"]["spec"] for w in workers)
    return ([compute_domain(cx)] if claims else []) + [graph]
