"""Rebuild the schemas in this folder from their sources (maintenance; the tests only read the JSON).

    python tests/data/schemas/extract.py K8S_DEFS LWS_CRD COMPUTEDOMAIN_CRD DYNAMO_CONFIG_PY

K8S_DEFS: kubernetes_validate/kubernetes-json-schema/v1.37.0-local-strict/_definitions.json from the PyPI
wheel kubernetes-validate 1.37.0; LWS_CRD: kubernetes-sigs/lws config/crd/bases/
leaderworkerset.x-k8s.io_leaderworkersets.yaml; COMPUTEDOMAIN_CRD: NVIDIA/k8s-dra-driver-gpu
deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml; DYNAMO_CONFIG_PY:
dynamo/profiler/utils/config.py from the PyPI wheel ai-dynamo 1.6.1 (needs pydantic).
Descriptions are dropped (size); nothing else is changed.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).parent
ROOTS = ("io.k8s.api.core.v1.PodTemplateSpec", "io.k8s.api.resource.v1.ResourceClaimTemplate")
DGD_MODELS = {"DgdModel", "Container", "PodSpec", "PodTemplate", "MultinodeConfig", "Component", "Spec", "Metadata",
              "Config"}


def strip(node, in_props: bool = False):
    """`node` without "description" strings (a property named description is kept)."""
    if isinstance(node, dict):
        return {k: strip(v, k == "properties") for k, v in node.items()
                if in_props or not (k == "description" and isinstance(v, str))}
    return [strip(v) for v in node] if isinstance(node, list) else node


def write(name: str, obj: dict) -> None:
    (HERE / name).write_text(json.dumps(obj, separators=(",", ":"), sort_keys=True) + "\n")


def core(path: str) -> None:
    """The Kubernetes types the manifests use, closed over their references."""
    defs = json.loads(Path(path).read_text())["$defs"]
    need, stack = set(), list(ROOTS)
    while stack:
        k = stack.pop()
        if k not in need:
            need.add(k)
            stack += re.findall(r"#/\$defs/([A-Za-z0-9_.\-]+)", json.dumps(defs[k]))
    text = json.dumps(strip({k: defs[k] for k in sorted(need)})).replace("/api/_definitions.json#", "#")
    write("k8s-1.37-strict.json", {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                   "$defs": json.loads(text)})


def crd(path: str, version: str, name: str) -> None:
    doc = yaml.safe_load(Path(path).read_text())
    (v,) = [v for v in doc["spec"]["versions"] if v["name"] == version]
    write(name, strip(v["schema"]["openAPIV3Schema"]))


def dynamo(path: str) -> None:
    """JSON schema of the pydantic model Dynamo's profiler writes DynamoGraphDeployments with."""
    tree = ast.parse(Path(path).read_text())
    body = [ast.unparse(n) for n in tree.body if isinstance(n, ast.ClassDef) and n.name in DGD_MODELS]
    ns: dict = {}
    code = "from typing import Any, Optional\nfrom pydantic import BaseModel, Field\n" + "\n".join(body)
    exec(compile(code, path, "exec", dont_inherit=True), ns)  # this file's `annotations` future stays out
    write("dynamo-dgd-v1beta1.json", ns["Config"].model_json_schema(by_alias=True))


if __name__ == "__main__":
    k8s_defs, lws, cd, dgd = sys.argv[1:5]
    core(k8s_defs)
    crd(lws, "v1", "lws-leaderworkerset-v1.json")
    crd(cd, "v1beta1", "nvidia-computedomain-v1beta1.json")
    dynamo(dgd)
