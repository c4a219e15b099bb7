"""Kubernetes manifests for llm-d's wide-EP well-lit path (LeaderWorkerSet per role + InferencePool).

Follows llm-d guides/wide-ep-lws (modelserver/gpu/vllm-deepseek-v4/base/{prefill,decode}.yaml and
manifests/inferencepool.values.yaml): one LeaderWorkerSet per planned layout, `replicas` = planned
instances, `size` = pods per instance (one pod per host), each pod requesting its GPUs
(`nvidia.com/gpu`) and running `vllm serve` in hybrid-LB mode over its local DP ranks
(`--data-parallel-start-rank` from LWS_WORKER_INDEX, `--data-parallel-address` = LWS_LEADER_ADDRESS).
Decode pods carry llm-d's routing sidecar (port 8000 -> vLLM on 8200, NIXL connector), which runs the
prefill-then-decode hand-off the inference scheduler (EPP) picks; the InferencePool selects the pods
by the labels below. Engine flags are the same as the bare-host scripts (engine.py).
"""
from __future__ import annotations

from . import fabric
from .engine import Context, frontend_settings, serve_flags
from .placement import Instance, Placement
from .policies import scheduler_plugins, scheduler_profile
from .safe import dns_label, label_value
from .scripts import checked, continued

IMAGE = "vllm/vllm-openai:v0.33.0"  # the release vllm_flags.txt was taken from
SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.7.1"  # llm-d wide-ep-lws decode.yaml
API_PORT = 8000  # pod port clients reach: vLLM (prefill, aggregated) or the routing sidecar (decode)
DECODE_VLLM_PORT = 8200  # vLLM behind the decode pod's sidecar
RPC_PORT = 5555  # --data-parallel-rpc-port inside the LWS group (llm-d's value)
NIXL_PORT = 5600  # VLLM_NIXL_SIDE_CHANNEL_PORT
ROLE_LABEL = {"prefill": "prefill", "decode": "decode", "aggregated": "both"}
# LeaderWorkerSet names: its StatefulSets are named <lws> and <lws>-<group>, and a StatefulSet's pods
# carry the label controller-revision-hash=<statefulset>-<10-char hash>, which must fit a 63-character
# label value (kubernetes/kubernetes#64023), so the LWS name stays well below 63
LWS_NAME_MAX = 40


def object_name(cx: Context, part: str, limit: int = LWS_NAME_MAX) -> str:
    """Kubernetes name of the object for `part` of the plan (unique per part, stable, hashed when cut)."""
    return dns_label(f"{cx.plan.name}-{part}", limit)


def labels(cx: Context, pool: str | None = None) -> dict[str, str]:
    out = {"llm-d.ai/inference-serving": "true", "llm-d.ai/guide": "wide-ep-lws",
           "llm-d.ai/model": label_value(cx.family.hf_id.split("/")[-1])}
    if pool:
        out["llm-d.ai/role"] = ROLE_LABEL[pool]
    return out


def vllm_port(pool: str) -> int:
    return DECODE_VLLM_PORT if pool == "decode" else API_PORT


def pod_words(inst: Instance, cx: Context) -> list[str]:
    """`vllm serve` words of one pod of `inst` (every pod of an instance runs the same command)."""
    lay, s = inst.layout, inst.slices[0]
    f = ["vllm", "serve", cx.family.hf_id, "--served-model-name", cx.family.hf_id,
         "--port", str(vllm_port(inst.pool))]
    if lay.dp > 1:
        f += ["--data-parallel-size", str(lay.dp), "--data-parallel-rpc-port", str(RPC_PORT)]
    if inst.multi_host:
        f += ["--data-parallel-size-local", str(s.ranks), "--data-parallel-start-rank", '"$START_RANK"',
              "--data-parallel-address", '"$LWS_LEADER_ADDRESS"', "--data-parallel-hybrid-lb"]
    api, stream = frontend_settings(lay, s.ranks)
    return checked("vllm serve", f + ["--api-server-count", str(api), "--stream-interval", str(stream)]
                   + serve_flags(lay, cx))


GIB = 2**30
# Per-host CPU and memory requests of llm-d's wide-EP pods (32 CPUs, 512 GiB for a whole 4-GPU GB200 tray
# or 8-GPU H200 node: guides/wide-ep-lws decode.yaml and prefill.yaml); a pod on part of a host gets
# its share, plus the host memory of weights the plan offloads (Layout.offload_gb per GPU).
HOST_CPUS, HOST_MEMORY_GIB = 32, 512
JIT_CACHE_GIB = 64  # compiled kernels (torch.compile, DeepGEMM, FlashInfer) under VLLM_CACHE_ROOT
MODEL_CACHE = "/var/cache/huggingface"  # HF_HUB_CACHE, as llm-d's V4 guide mounts it
JIT_CACHE = "/var/cache/vllm"
CLAIM = "compute-domain-channel"  # the pod's name for its IMEX channel claim


def model_cache_gib(cx: Context) -> int:
    """Size of the model-cache volume: the whole checkpoint (every expert, the drafter) with 10% headroom
    for tokenizer and config files, priced as the planner prices weights (sim/cost/memory.py)."""
    from rackplan.sim.cost.memory import weight_bytes_per_rank
    from rackplan.specs import Layout, Speculation

    whole = Layout("both", dp=1, tp=1, expert_parallel=False, speculation=Speculation(1, 1.0)
                   if cx.model.draft is not None else None)
    return -(-int(sum(weight_bytes_per_rank(cx.model, whole).values()) * 1.1) // GIB)


def pod_resources(inst: Instance, cx: Context) -> dict:
    """GPUs, the host share of CPU and memory, ephemeral storage for the caches, the RDMA device."""
    gpus = len(inst.slices[0].gpus)
    share = gpus / cx.hw.gpus_per_node
    mem = -(-int(HOST_MEMORY_GIB * share + inst.layout.offload_gb * gpus * 1e9 / GIB) // 1)
    disk = model_cache_gib(cx) + JIT_CACHE_GIB
    req = {"cpu": str(max(1, round(HOST_CPUS * share))), "memory": f"{mem}Gi", "ephemeral-storage": f"{disk}Gi",
           "nvidia.com/gpu": str(gpus)}
    if cx.hw.fabric == "infiniband" and fabric.settings(cx.hw, cx.plan, inst.multi_host):
        req[fabric.RDMA_RESOURCE[0]] = "1"
    out = {"limits": {k: v for k, v in req.items() if k != "cpu"}, "requests": req}
    if needs_claim(inst, cx):
        out["claims"] = [{"name": CLAIM}]
    return out


def needs_claim(inst: Instance, cx: Context) -> bool:
    """Whether the pods of `inst` need an IMEX channel (multi-node NVLink between trays)."""
    return cx.hw.fabric == "mnnvl" and bool(fabric.settings(cx.hw, cx.plan, inst.multi_host))


def pod_env(inst: Instance, cx: Context) -> list[dict]:
    s = inst.slices[0]
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "llm-d-hf-token", "key": "HF_TOKEN"}}},
           {"name": "DP_SIZE_LOCAL", "value": str(s.ranks)},
           {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_PORT)},
           {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "HF_HUB_CACHE", "value": MODEL_CACHE}, {"name": "VLLM_CACHE_ROOT", "value": JIT_CACHE}]
    env += [{"name": k, "value": v} for k, v in cx.family.env]
    return env + [{"name": f.name, "value": f.value} for f in fabric.settings(cx.hw, cx.plan, inst.multi_host)]


def _probes() -> dict:
    """llm-d's V4 decode probes: start-up waits up to 2,700 s for weights and compilation, liveness
    restarts a hung server, readiness admits traffic once the model is listed."""
    health = {"httpGet": {"path": "/health", "port": "modelserver"}, "timeoutSeconds": 5}
    return {"startupProbe": {**health, "periodSeconds": 1, "failureThreshold": 2700},
            "livenessProbe": {**health, "periodSeconds": 30, "failureThreshold": 3},
            "readinessProbe": {"httpGet": {"path": "/v1/models", "port": "modelserver"}, "timeoutSeconds": 5,
                               "periodSeconds": 10, "failureThreshold": 3}}


def _container(inst: Instance, cx: Context) -> dict:
    script = ["find /dev/shm -type f -delete  # stale segments from a crashed run (llm-d issue 352)",
              'START_RANK=$(( ${LWS_WORKER_INDEX:-0} * DP_SIZE_LOCAL ))',
              "exec " + continued(pod_words(inst, cx), "  ")]
    return {"name": "vllm", "image": IMAGE, "command": ["/bin/bash", "-c"], "args": ["\n".join(script)],
            "env": pod_env(inst, cx),
            "ports": [{"containerPort": vllm_port(inst.pool), "name": "modelserver", "protocol": "TCP"},
                      {"containerPort": NIXL_PORT, "name": "nixl", "protocol": "TCP"}],
            **_probes(), "resources": pod_resources(inst, cx),
            "securityContext": {"capabilities": {"add": ["IPC_LOCK", "SYS_RAWIO"]}},
            "volumeMounts": volume_mounts()}


def volume_mounts() -> list[dict]:
    """Where pod_volumes are mounted: /dev/shm, the model cache (HF_HUB_CACHE), the kernel cache."""
    return [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "model-cache", "mountPath": MODEL_CACHE},
            {"name": "jit-cache", "mountPath": JIT_CACHE}]


def pod_volumes(cx: Context) -> list[dict]:
    """/dev/shm in memory (llm-d: 2 GiB, "roughly 32MB per local DP plus scratch"; NCCL 2.27), the model
    cache sized to the checkpoint, the kernel cache."""
    return [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
            {"name": "model-cache", "emptyDir": {"sizeLimit": f"{model_cache_gib(cx)}Gi"}},
            {"name": "jit-cache", "emptyDir": {"sizeLimit": f"{JIT_CACHE_GIB}Gi"}}]


def compute_domain(cx: Context) -> dict:
    """The ComputeDomain whose IMEX channel every multi-node-NVLink pod claims (NVIDIA DRA driver for
    GPUs; the driver creates the ResourceClaimTemplate named in spec.channel). numNodes 0: the CRD's
    recommended value with IMEX daemons found by DNS name (the driver's default feature gate)."""
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
            "metadata": {"name": object_name(cx, "compute-domain", 63), "labels": labels(cx)},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": channel_template(cx)}}}}


def channel_template(cx: Context) -> str:
    return object_name(cx, "imex-channel", 63)


def _sidecar() -> dict:
    """llm-d's routing proxy: the decode pod's front door, which asks a prefill pod first."""
    return {"name": "routing-proxy", "image": SIDECAR_IMAGE, "restartPolicy": "Always",
            "args": [f"--port={API_PORT}", f"--vllm-port={DECODE_VLLM_PORT}", "--connector=nixlv2",
                     "--secure-proxy=false"],
            "ports": [{"containerPort": API_PORT, "name": "sidecar", "protocol": "TCP"}]}


def leader_worker_set(inst: Instance, cx: Context) -> dict:
    """The LeaderWorkerSet of the layout `inst` is the first replica of."""
    lay, pool = inst.layout, inst.pool
    pod: dict = {"containers": [_container(inst, cx)], "volumes": pod_volumes(cx)}
    if needs_claim(inst, cx):
        pod["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": channel_template(cx)}]
    if pool == "decode" and cx.plan.disaggregated:
        pod = {"initContainers": [_sidecar()], **pod}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": object_name(cx, inst.name.rsplit('-', 1)[0]),
                         "labels": labels(cx, pool)},
            "spec": {"replicas": lay.replicas,
                     "leaderWorkerTemplate": {"size": len(inst.slices),
                                              "workerTemplate": {"metadata": {"labels": labels(cx, pool)},
                                                                 "spec": pod}}}}


def manifests(pl: Placement, cx: Context) -> list[dict]:
    """One LeaderWorkerSet per planned layout (its first instance stands for all replicas)."""
    firsts = [inst for inst in pl.instances if inst.name.endswith("-0")]
    domain = [compute_domain(cx)] if any(needs_claim(inst, cx) for inst in firsts) else []
    return domain + [leader_worker_set(inst, cx) for inst in firsts]


def dump(docs: list[dict]) -> str:
    """YAML text of several documents, multi-line strings (the pod scripts) as literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return yaml.dump_all(docs, Dumper=Dumper, sort_keys=False, width=200)


def scheduler_config(cx: Context) -> dict:
    """The llm-d inference scheduler (EPP) configuration of the plan's router policy (policies.py); a
    disaggregated plan always prefills remotely (threshold 0), as the plan prices every request."""
    plugins = scheduler_plugins(cx.plan.router)
    profiles = [scheduler_profile("default", cx.plan.router)]
    if cx.plan.disaggregated:
        plugins = [{"type": "prefill-header-handler"}, {"type": "prefill-filter"}, {"type": "decode-filter"},
                   *plugins, {"type": "pd-profile-handler", "parameters": {"threshold": 0, "hashBlockSize": 5}}]
        profiles = [scheduler_profile(r, cx.plan.router, (f"{r}-filter",)) for r in ("prefill", "decode")]
    return {"apiVersion": "inference.networking.x-k8s.io/v1alpha1", "kind": "EndpointPickerConfig",
            "plugins": plugins, "schedulingProfiles": profiles}


def inferencepool_values(cx: Context) -> dict:
    """Helm values for the gateway-api-inference-extension InferencePool chart (llm-d scheduler)."""
    config = scheduler_config(cx)
    head = f"# simulated router policy: {cx.plan.router} (rackplan/deploy/policies.py)\n"
    import yaml

    return {"inferenceExtension": {"replicas": 1, "image": {"name": "llm-d-inference-scheduler",
                                                            "hub": "ghcr.io/llm-d", "tag": "v0.5.0"},
                                   "extProcPort": 9002, "pluginsConfigFile": "custom-plugins.yaml",
                                   "pluginsCustomConfig": {"custom-plugins.yaml": head + yaml.safe_dump(
                                       config, sort_keys=False)}},
            "inferencePool": {"modelServers": {"matchLabels": labels(cx)}}}
