"""Every manifest of every target validates against the real schemas, shipped in tests/data/schemas
(README.md there names each source): LeaderWorkerSet and ComputeDomain CRDs (openAPIV3Schema), the
Kubernetes 1.37 core types in strict form (no unknown field) for every pod template, and Dynamo's
DynamoGraphDeployment model. Plans: the seed, the H200 32-GPU, a 144-GPU two-rack and a single-user plan."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from rackplan.deploy import build, context_for
from rackplan.specs import load_plan

jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data"
SCHEMAS = DATA / "schemas"
PLANS = {"seed": "v41-flash-gb300-nvl72", "h200-32gpu": str(DATA / "h200-dsv3-32gpu.yaml"),
         "gb300-144gpu": str(DATA / "v41-gb300-144gpu.yaml"), "single-user": "v41-flash-gb300-single-user"}


@lru_cache(maxsize=None)
def schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


def core(kind: str):
    """A strict validator of one Kubernetes core type (io.k8s.api...)."""
    defs = schema("k8s-1.37-strict.json")
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{kind}", "$defs": defs["$defs"]})


POD_TEMPLATE = "io.k8s.api.core.v1.PodTemplateSpec"


def errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def check(doc: dict) -> list[str]:
    """Schema errors of one manifest, by kind."""
    kind = doc["kind"]
    if kind == "LeaderWorkerSet":
        tmpl = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        return (errors(jsonschema.Draft7Validator(schema("lws-leaderworkerset-v1.json")), doc)
                + errors(core(POD_TEMPLATE), tmpl))
    if kind == "ComputeDomain":
        return errors(jsonschema.Draft7Validator(schema("nvidia-computedomain-v1beta1.json")), doc)
    if kind == "DynamoGraphDeployment":
        out = errors(jsonschema.Draft202012Validator(schema("dynamo-dgd-v1beta1.json")), doc)
        return out + [e for c in doc["spec"]["components"] for e in errors(core(POD_TEMPLATE), c["podTemplate"])]
    return [f"no schema for kind {kind}"]


@pytest.fixture(scope="module", params=list(PLANS))
def files(request):
    return request.param, build(context_for(load_plan(PLANS[request.param])))


def test_every_manifest_of_every_target_validates(files):
    plan, out = files
    docs = [d for name in ("k8s/modelserver.yaml", "dynamo/graph.yaml") for d in yaml.safe_load_all(out[name])]
    kinds = {d["kind"] for d in docs}
    assert {"LeaderWorkerSet", "DynamoGraphDeployment"} <= kinds
    assert ("ComputeDomain" in kinds) == (plan in ("seed", "gb300-144gpu"))  # NVL72 pods that leave their tray
    for doc in docs:
        assert check(doc) == [], (plan, doc["kind"], doc["metadata"]["name"])
    # the scheduler config is Helm values (no published schema for the chart's values): it parses, and
    # its plugin references resolve to declared plugins
    values = yaml.safe_load(out["k8s/inferencepool.values.yaml"])
    epp = yaml.safe_load(values["inferenceExtension"]["pluginsCustomConfig"]["custom-plugins.yaml"])
    declared = {p.get("name", p["type"]) for p in epp["plugins"]}
    assert {r["pluginRef"] for prof in epp["schedulingProfiles"] for r in prof["plugins"]} <= declared


@pytest.mark.parametrize("break_it, where", [
    (lambda d: d["spec"]["leaderWorkerTemplate"].update(size="2"), "size"),
    (lambda d: d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0].update(envv=[]),
     "envv"),
    (lambda d: d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["env"].append(
        {"name": "X", "value": 1}), "env"),
])
def test_the_schemas_catch_a_broken_manifest(break_it, where):
    out = build(context_for(load_plan(PLANS["h200-32gpu"])), "llm-d")
    doc = next(d for d in yaml.safe_load_all(out["k8s/modelserver.yaml"]) if d["kind"] == "LeaderWorkerSet")
    assert check(doc) == []
    break_it(doc)
    assert any(where in e for e in check(doc))


def test_a_compute_domain_without_a_channel_is_refused():
    out = build(context_for(load_plan(PLANS["seed"])), "llm-d")
    cd = next(d for d in yaml.safe_load_all(out["k8s/modelserver.yaml"]) if d["kind"] == "ComputeDomain")
    del cd["spec"]["channel"]
    assert any("channel" in e for e in check(cd))
