"""Fabric settings per hardware class (rackplan/deploy/fabric.py): NVL72 instances that span trays claim
an IMEX channel and set NCCL/UCX multi-node NVLink; InfiniBand instances set NVSHMEM IBGDA and NCCL IB
and request an RDMA device; instances whose traffic stays on one host get none. The scripts and the
manifests carry the same settings."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from rackplan.deploy import build, context_for, fabric, k8s, placement
from rackplan.specs import SpecError, load_hardware, load_plan

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[1] / "data"
SEED, H200, SINGLE = "v41-flash-gb300-nvl72", str(DATA / "h200-dsv3-32gpu.yaml"), "v41-flash-gb300-single-user"


def docs(files: dict[str, str]) -> list[dict]:
    return list(yaml.safe_load_all(files["k8s/modelserver.yaml"]))


def pods(files: dict[str, str]) -> list[dict]:
    return [d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"] for d in docs(files)
            if d["kind"] == "LeaderWorkerSet"]


def container_env(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}


def exported(script: str) -> dict[str, str]:
    return dict(re.findall(r"^export (\w+)=(\S+)", script, re.M))


def test_nvl72_instances_claim_an_imex_channel_and_set_multi_node_nvlink():
    files = build(context_for(load_plan(SEED)))
    (domain,) = [d for d in docs(files) if d["kind"] == "ComputeDomain"]
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    for pod in pods(files):  # a disaggregated plan: every pod hands KV across trays (NIXL over MNNVL)
        assert pod["resourceClaims"] == [{"name": k8s.CLAIM, "resourceClaimTemplateName": template}]
        assert pod["containers"][0]["resources"]["claims"] == [{"name": k8s.CLAIM}]
        env = container_env(pod)
        assert env["NCCL_MNNVL_ENABLE"] == "1" and env["UCX_CUDA_IPC_ENABLE_MNNVL"] == "y"
        assert env["NCCL_CUMEM_ENABLE"] == "1" and "cuda_ipc" in env["UCX_TLS"] and env["NVIDIA_GDRCOPY"] == "enabled"
        assert "NVSHMEM_IB_ENABLE_IBGDA" not in env and "rdma/ib" not in pod["containers"][0]["resources"]["limits"]
    for h in (0, 17):
        ex = exported(files[f"host-{h:02d}.sh"])
        assert ex["NCCL_MNNVL_ENABLE"] == "1" and ex["UCX_TLS"] == "cuda_copy,cuda_ipc,tcp"


def test_infiniband_instances_set_ibgda_nccl_ib_and_request_an_rdma_device():
    files = build(context_for(load_plan(H200)))
    assert not [d for d in docs(files) if d["kind"] == "ComputeDomain"]
    for pod in pods(files):
        env, res = container_env(pod), pod["containers"][0]["resources"]
        assert env["NVSHMEM_REMOTE_TRANSPORT"] == "ibgda" and env["NVSHMEM_IB_ENABLE_IBGDA"] == "true"
        assert env["NCCL_IB_HCA"] == fabric.OPERATOR["IB_HCA"][0] and env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert res["requests"]["rdma/ib"] == res["limits"]["rdma/ib"] == "1"
        assert "resourceClaims" not in pod and "NCCL_MNNVL_ENABLE" not in env
    ex = exported(files["host-01.sh"])
    assert ex["NCCL_IB_HCA"] == '"$IB_HCA"' and ex["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] == '"$SOCKET_IFNAME"'
    assert re.search(r"^IB_HCA=.*\|\| IB_HCA=mlx5", files["env.sh"], re.M)


@pytest.mark.parametrize("plan", [SEED, H200])
def test_scripts_and_manifests_carry_the_same_fabric_settings(plan):
    files = build(context_for(load_plan(plan)))
    cx = context_for(load_plan(plan))
    names = {s.name for s in fabric.SETTINGS[cx.hw.fabric]}
    for pod in pods(files):
        assert names <= set(container_env(pod))
    for name, text in files.items():
        if name.startswith("host-"):
            assert names <= set(exported(text))
    graph = [d for d in yaml.safe_load_all(files["dynamo/graph.yaml"]) if d["kind"] == "DynamoGraphDeployment"][0]
    workers = [c for c in graph["spec"]["components"] if c["type"] != "frontend"]
    assert workers and all(names <= set(container_env(c["podTemplate"]["spec"])) for c in workers)
    claims = {"resourceClaims" in c["podTemplate"]["spec"] for c in workers}
    assert claims == {cx.hw.fabric == "mnnvl"}
    multi = {c["name"]: c.get("multinode", {}).get("nodeCount") for c in workers}
    assert multi["decode0"] == len(placement.place(cx.plan, cx.hw).pool("decode")[0].slices)


def test_an_instance_on_one_tray_of_an_aggregated_plan_needs_no_fabric():
    files = build(context_for(load_plan(SINGLE)))
    (pod,) = pods(files)
    assert "resourceClaims" not in pod and "NCCL_MNNVL_ENABLE" not in container_env(pod)
    assert [d["kind"] for d in docs(files)] == ["LeaderWorkerSet"]
    assert "NCCL_MNNVL_ENABLE" not in files["host-00.sh"]


def test_a_multi_host_plan_on_hardware_without_a_fabric_is_refused():
    cx = context_for(load_plan(H200))
    bare = dataclasses.replace(cx, hw=dataclasses.replace(load_hardware("h200-sxm"), fabric="none"))
    with pytest.raises(SpecError, match=r"hardware\.fabric.*mnnvl or infiniband"):
        build(bare)


def test_pods_request_host_resources_probes_and_a_model_cache_sized_to_the_checkpoint():
    cx = context_for(load_plan(H200))
    # DeepSeek-V3: 671e9 parameters, FP8 weights (1 byte) + BF16 parts and the MTP module: at least
    # 671e9 bytes = 625 GiB, +10% headroom; well under 2 bytes a parameter (1,250 GiB)
    gib = k8s.model_cache_gib(cx)
    assert 671e9 * 1.1 / 2**30 <= gib < 1250
    for pod in pods(build(cx)):
        c = pod["containers"][0]
        req = c["resources"]["requests"]
        assert req["cpu"] == "32" and req["memory"] == "512Gi"  # whole 8-GPU nodes: llm-d's per-node request
        assert int(req["ephemeral-storage"][:-2]) == gib + k8s.JIT_CACHE_GIB
        assert {"startupProbe", "livenessProbe", "readinessProbe"} <= set(c)
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["model-cache"]["emptyDir"]["sizeLimit"] == f"{gib}Gi"
        assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
        assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/dev/shm", k8s.MODEL_CACHE}
        assert container_env(pod)["HF_HUB_CACHE"] == k8s.MODEL_CACHE


def test_every_shipped_gpu_names_its_fabric():
    from rackplan.specs import available

    got = {n: load_hardware(n).fabric for n in available("hardware")}
    assert {n for n, f in got.items() if f == "mnnvl"} == {"gb200-nvl72", "gb300-nvl72"}
    assert got["cpu-local"] == "none" and all(f == "infiniband" for n, f in got.items()
                                              if n not in ("gb200-nvl72", "gb300-nvl72", "cpu-local"))


def test_an_nvl72_instance_never_straddles_two_racks():
    """144-GPU plan: 33 x DEP2 prefill fill 16.5 trays of rack 0, so the DEP64 decode (16 trays) starts on
    rack 1's first tray (18) instead of straddling trays 17-32; tray 17 stays empty and gets no script."""
    cx = context_for(load_plan(str(DATA / "v41-gb300-144gpu.yaml")))
    pl = placement.place(cx.plan, cx.hw)
    per = cx.hw.nodes_per_domain  # 18 trays per NVL72 rack
    for inst in pl.instances:
        assert len({s.host // per for s in inst.slices}) == 1, inst.name
    (dec,) = pl.pool("decode")
    assert [s.host for s in dec.slices] == list(range(18, 34)) and not pl.on_host(17)
    files = build(cx)
    assert "host-17.sh" not in files and "host-18.sh" in files and "empty" in files["env.sh"]
