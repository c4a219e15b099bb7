"""Launch files of a plan (rackplan.deploy): flags vLLM knows, scripts bash accepts, placement, llm-d
manifests that match the published example and the launch flags, limits that match what was priced."""
from __future__ import annotations

import dataclasses
import json
import re
import shlex
import subprocess
from itertools import takewhile
from pathlib import Path

import pytest
import yaml

from rackplan.deploy import bench, build, context_for, engine, flaglist, placement, scripts, write
from rackplan.specs import EPLBConfig, Layout, Plan, SpecError, Speculation, load_model, load_plan

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[1] / "data"
SEED = "v41-flash-gb300-nvl72"
H200 = str(DATA / "h200-dsv3-32gpu.yaml")  # `rackplan plan ... --gpus 32 --workload isl4k-osl1k` output
TOOLS = {("vllm", "bench", "serve"): "vllm bench serve", ("vllm", "serve"): "vllm serve",
         ("vllm-router",): "vllm-router"}

# The fields llm-d's wide-EP example (guides/wide-ep-lws/modelserver/gpu/vllm-deepseek-v4/base/
# {prefill,decode}.yaml) sets and its InferencePool selects on.


def _obj(required: list[str], **props) -> dict:
    return {"type": "object", "required": required, "properties": props}


DNS_NAME = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
GPUS = _obj(["nvidia.com/gpu"], **{"nvidia.com/gpu": {"type": "string", "pattern": "^[1-9][0-9]*$"}})
CONTAINER = _obj(["name", "image", "command", "args", "ports", "resources"],
                 ports={"type": "array", "items": _obj(["containerPort", "name"])},
                 resources=_obj(["limits", "requests"], limits=GPUS, requests=GPUS))
POD_LABELS = _obj(["llm-d.ai/inference-serving", "llm-d.ai/model", "llm-d.ai/role"],
                  **{"llm-d.ai/inference-serving": {"const": "true"},
                     "llm-d.ai/role": {"enum": ["prefill", "decode", "both"]}})
WORKER = _obj(["metadata", "spec"], metadata=_obj(["labels"], labels=POD_LABELS),
              spec=_obj(["containers"], containers={"type": "array", "minItems": 1, "items": CONTAINER}))
LWS_SCHEMA = _obj(["apiVersion", "kind", "metadata", "spec"],
                  apiVersion={"const": "leaderworkerset.x-k8s.io/v1"}, kind={"const": "LeaderWorkerSet"},
                  metadata=_obj(["name", "labels"], name={"type": "string", "pattern": DNS_NAME}),
                  spec=_obj(["replicas", "leaderWorkerTemplate"], replicas={"type": "integer", "minimum": 1},
                            leaderWorkerTemplate=_obj(["size", "workerTemplate"],
                                                      size={"type": "integer", "minimum": 1}, workerTemplate=WORKER)))


def commands(text: str) -> list[tuple[str, list[str]]]:
    """(tool, arguments) of every vllm serve / vllm bench serve / vllm-router command in shell text."""
    out = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        words = shlex.split(line, comments=True)
        for i in range(len(words)):
            tool = next((name for key, name in TOOLS.items() if tuple(words[i:i + len(key)]) == key), None)
            if tool:
                rest = words[i + len(tool.split()):]
                out.append((tool, list(takewhile(lambda w: w not in (">", "&", "2>&1"), rest))))
                break
    return out


def value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def pod_scripts(files: dict[str, str]) -> list[tuple[dict, str]]:
    docs = list(yaml.safe_load_all(files["k8s/modelserver.yaml"]))
    return [(d, c["args"][0]) for d in docs if d["kind"] == "LeaderWorkerSet"
            for c in d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]]


@pytest.fixture(scope="module", params=[SEED, H200], ids=["seed-gb300", "h200-32gpu"])
def built(request):
    cx = context_for(load_plan(request.param))
    return cx, build(cx)


def _plan(**kw) -> Plan:
    """A variant of the seed plan (V4.1 on GB300 trays of 4 GPUs)."""
    return dataclasses.replace(load_plan(SEED), **kw)


VARIANTS = {  # every branch of the flag generator
    "v41-dspark-eplb-eager-sync": _plan(decode=(Layout("decode", dp=64, max_batch_per_rank=32, dbo=True,
                                                       cuda_graphs=False, async_scheduling=False,
                                                       speculation=Speculation(5, 3.5),
                                                       eplb=EPLBConfig(64, "hierarchical")),)),
    "v41-aggregated-tp4": _plan(prefill=(), decode=(), aggregated=(Layout("both", dp=1, tp=4, ep=4, replicas=2,
                                                                          speculation=Speculation(5, 3.5)),)),
    "v3-h200-tp8-prefill": dataclasses.replace(load_plan(H200), prefill=(Layout("prefill", dp=1, tp=8, ep=1),)),
}


@pytest.mark.parametrize("case", ["seed-gb300", "h200-32gpu", *VARIANTS])
def test_every_emitted_flag_is_in_the_kept_vllm_list(case):
    plan = VARIANTS.get(case) or load_plan(SEED if case == "seed-gb300" else H200)
    files = build(context_for(plan))
    cmds = [c for name, text in files.items() if name.endswith(".sh") for c in commands(text)]
    cmds += [c for _, script in pod_scripts(files) for c in commands(script)]
    assert {tool for tool, _ in cmds} == {"vllm serve", "vllm bench serve", "vllm-router"}
    for tool, args in cmds:
        assert flaglist.unknown(tool, args) == [], (tool, args)


def test_kept_list_names_its_vllm_release_and_catches_a_misspelling():
    head = " ".join(flaglist.header())
    assert "vLLM 0.33.0" in head and "sha256" in head and "arg_utils.py" in head and "router" in head
    lists = flaglist.load()
    assert len(lists["vllm serve"]) > 300 and "--data-parallel-hybrid-lb" in lists["vllm serve"]
    assert flaglist.unknown("vllm serve", ["--enable-expert-paralel", "--port=8000", "8000"]) == [
        "--enable-expert-paralel"]
    with pytest.raises(RuntimeError, match="enable-expert-paralel"):  # the generator refuses to write one
        scripts.checked("vllm serve", ["vllm", "serve", "--enable-expert-paralel"])


def test_generated_files_pass_bash_n(built, tmp_path):
    _, files = built
    paths = write(files, tmp_path / "launch")
    scripts = [p for p in paths if p.suffix == ".sh"]
    for i, (_, script) in enumerate(pod_scripts(files)):
        scripts.append(tmp_path / f"pod-{i}.sh")
        scripts[-1].write_text(script)
    assert len(scripts) >= 5
    for p in scripts:
        r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, (p.name, r.stderr)


def test_manifest_follows_llmd_example_and_matches_the_launch_flags(built):
    jsonschema = pytest.importorskip("jsonschema")
    cx, files = built
    gpus = 0
    for doc, script in pod_scripts(files):
        jsonschema.validate(doc, LWS_SCHEMA)
        spec, pod = doc["spec"], doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        vllm = pod["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in vllm["ports"]}
        env = {e["name"]: e.get("value") for e in vllm["env"]}
        (tool, args), = commands(script)
        assert tool == "vllm serve" and int(value(args, "--port")) == ports["modelserver"]
        assert int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) == ports["nixl"]
        per_pod = int(vllm["resources"]["requests"]["nvidia.com/gpu"])
        size = spec["leaderWorkerTemplate"]["size"]
        dp, tp = int(value(args, "--data-parallel-size") if "--data-parallel-size" in args else 1), \
            int(value(args, "--tensor-parallel-size"))
        assert per_pod * size == dp * tp
        if size > 1:
            assert int(value(args, "--data-parallel-size-local")) * size == dp
        if doc["metadata"]["labels"]["llm-d.ai/role"] == "decode":
            side = pod["initContainers"][0]
            assert f"--vllm-port={ports['modelserver']}" in side["args"]
            assert f"--port={side['ports'][0]['containerPort']}" in side["args"]
        gpus += per_pod * size * spec["replicas"]
    assert gpus == cx.plan.gpus_used
    pool = yaml.safe_load(files["k8s/inferencepool.values.yaml"])["inferencePool"]["modelServers"]["matchLabels"]
    for doc, _ in pod_scripts(files):
        assert pool.items() <= doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"].items()


def test_seed_placement_hosts_gpus_ranks_and_ports():
    cx = context_for(load_plan(SEED))
    pl = placement.place(cx.plan, cx.hw)
    assert pl.num_hosts == 18 and pl.gpus_per_host == 4
    assert [(i.name, s.devices) for i, s in pl.on_host(0)] == [("prefill0-0", "0,1"), ("prefill0-1", "2,3")]
    dec = pl.pool("decode")[0]
    assert [s.host for s in dec.slices] == list(range(2, 18))
    assert [s.start_rank for s in dec.slices] == list(range(0, 64, 4)) and {s.ranks for s in dec.slices} == {4}
    insts = pl.instances
    assert len({i.port for i in insts}) == len({i.rpc_port for i in insts}) == len(insts)
    nixl = [set(range(i.nixl_port, i.nixl_port + i.layout.dp)) for i in insts]
    assert sum(map(len, nixl)) == len(set().union(*nixl))  # side-channel port ranges never overlap
    host2 = commands(build(cx)["host-03.sh"])
    (_, args), = host2
    assert value(args, "--data-parallel-start-rank") == "4" and value(args, "--data-parallel-address") == "$HOST_02"
    assert "--data-parallel-hybrid-lb" in args


def test_per_rank_limits_are_the_priced_ones(built):
    cx, files = built
    pl = placement.place(cx.plan, cx.hw)
    for inst in pl.instances:
        (_, args), = [c for c in commands(files[f"host-{inst.head:02d}.sh"])
                      if value(c[1], "--port") == str(inst.port)]
        lay, seqs = inst.layout, int(value(args, "--max-num-seqs"))
        budget = int(value(args, "--max-num-batched-tokens"))
        assert seqs == lay.max_batch_per_rank
        if lay.role == "prefill":
            assert budget == lay.max_tokens_per_step
        else:
            assert budget >= seqs * (1 + (lay.speculation.num_tokens if lay.speculation else 0))


def test_host_settings_the_planner_chose_reach_every_serve_command():
    """A decode layout's frontend and engine-loop settings (sim/cost/host.py prices them) become its
    flags on every host it spans, in the scripts and the llm-d manifests alike."""
    lay = Layout("decode", dp=64, max_batch_per_rank=128, dbo=True, eplb=EPLBConfig(64, "hierarchical"),
                 api_servers=8, stream_interval=10, cuda_graphs=False, async_scheduling=False)
    files = build(context_for(_plan(decode=(lay,))))
    cmds = [c for name, text in files.items() if name.startswith("host-") for c in commands(text)]
    cmds += [c for _, script in pod_scripts(files) for c in commands(script)]
    decode = [args for tool, args in cmds if tool == "vllm serve" and value(args, "--max-num-seqs") == "128"]
    assert decode and all(value(a, "--api-server-count") == "8" and value(a, "--stream-interval") == "10"
                          and "--enforce-eager" in a and "--no-async-scheduling" in a for a in decode)
    prefill = [args for tool, args in cmds if tool == "vllm serve" and value(args, "--max-num-seqs") == "64"]
    assert all(value(a, "--api-server-count") == "2" and value(a, "--stream-interval") == "1"  # defaults
               and "--async-scheduling" in a for a in prefill)


def test_speculation_method_per_model_family():
    files = build(context_for(VARIANTS["v41-dspark-eplb-eager-sync"]))
    serves = [a for n, t in files.items() if n.endswith(".sh") for tool, a in commands(t) if tool == "vllm serve"]
    specs = [json.loads(value(a, "--speculative-config")) for a in serves]
    assert len(specs) == len(serves)  # prefill runs the drafter too (KV of the draft layers)
    assert {s["method"] for s in specs} == {"dspark"} and all("model" not in s for s in specs)
    assert {s["num_speculative_tokens"] for s in specs} == {5}
    assert all("$" not in value(a, "--speculative-config") for a in serves)  # nothing left for a shell to expand
    h200 = build(context_for(load_plan(H200)))
    (_, args), = commands(h200["host-01.sh"])
    assert json.loads(value(args, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 1}


def test_dbo_flags_are_the_priced_thresholds():
    plan = load_plan(H200)
    lay = dataclasses.replace(plan.decode[0], dbo=True, dbo_decode_token_threshold=64, dbo_prefill_token_threshold=1024)
    cx = context_for(dataclasses.replace(plan, decode=(lay,)))
    flags = engine.dbo_flags(lay, cx)
    assert flags == ["--enable-dbo", "--dbo-decode-token-threshold", "64", "--dbo-prefill-token-threshold", "1024"]
    assert engine.dbo_flags(dataclasses.replace(lay, dbo=False), cx) == []


@pytest.mark.parametrize("change, field", [
    (dict(decode=(Layout("decode", dp=64, ep=32),)), "decode.ep"),
    (dict(decode=(Layout("decode", dp=6),)), "decode[0]"),
    # 4 x DEP3 leave a GPU idle on each of 4 trays: 18 trays for 68 GPUs (17 trays)
    (dict(num_gpus=68, prefill=(Layout("prefill", dp=3, replicas=4),), decode=(Layout("decode", dp=56),)),
     "enough hosts"),
])
def test_plans_vllm_cannot_run_are_one_line_errors(change, field):
    with pytest.raises(SpecError, match=re.escape(field)):
        build(context_for(_plan(**change)))


def test_colocated_and_unknown_models_are_rejected():
    with pytest.raises(SpecError, match="colocated"):
        build(context_for(load_plan("tiny-cpu")))
    tiny = dataclasses.replace(context_for(load_plan(SEED)), model=load_model("tiny-moe"))
    with pytest.raises(SpecError, match="model"):
        build(tiny)


def test_a_foreign_folder_is_never_replaced(tmp_path):
    files = build(context_for(load_plan(H200)))
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SpecError, match="empty folder"):
        write(files, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    out = write(files, tmp_path / "launch")
    again = write(files, tmp_path / "launch")  # a folder rackplan wrote is replaced
    assert out == again and (tmp_path / "launch" / "bench.sh").stat().st_mode & 0o111


def test_bench_replays_the_requests_the_simulator_draws(built):
    from rackplan.sim.workload import make_requests

    cx, files = built
    lines = [json.loads(x) for x in files["bench_trace.jsonl"].splitlines()]
    reqs = make_requests(bench.planned_workload(cx))
    assert len(lines) == len(reqs)
    assert [ln["input_length"] for ln in lines] == reqs.isl.tolist()
    assert [ln["output_length"] for ln in lines] == reqs.osl.tolist()
    assert lines[5]["timestamp"] == pytest.approx(reqs.arrival_s[5] * 1e3, abs=1e-3)
    shared = [sum(1 for h in ln["hash_ids"] if h < bench.UNIQUE_IDS) for ln in lines]
    assert shared == [int(c) // bench.CHUNK for c in reqs.cached]
    assert all(len(ln["hash_ids"]) == -(-ln["input_length"] // bench.CHUNK) for ln in lines)
    (_, args), = commands(files["bench.sh"])
    assert value(args, "--num-prompts") == str(len(reqs)) and "--save-detailed" in args
    # open loop: each request at its own trace timestamp, not a Poisson draw of vLLM's own (--self-timed);
    # the planned rate is recorded with the result
    assert "--self-timed" in args and "--request-rate" not in args
    rate = float(next(a for a in args if a.startswith("rackplan_request_rate=")).split("=", 1)[1])
    assert rate == pytest.approx(bench.planned_workload(cx).arrival.rate, rel=1e-5)


def test_flags_mirror_tp_moe_pipeline_memory_and_offload():
    lay = Layout("both", dp=1, tp=4, expert_parallel=False, pp=2, gpu_memory_utilization=0.85, offload_gb=40.0)
    par, batch = engine.parallel_flags(lay), engine.batch_flags(lay)
    assert par == ["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"]  # experts TP-sharded: no EP
    assert batch[-4:] == ["--gpu-memory-utilization", "0.85", "--cpu-offload-gb", "40"]
    assert "--enable-expert-parallel" in engine.parallel_flags(Layout("both", dp=1, tp=4))


def test_kept_choices_and_required_pairs_catch_values_vllm_refuses():
    serve, router = flaglist.choices("vllm serve"), flaglist.choices("vllm-router")
    assert {"deepep_low_latency", "deepep_high_throughput"} <= serve["--all2all-backend"]
    assert {"flashinfer_trtllm", "auto", "deep_gemm_mega_moe"} <= serve["--moe-backend"]
    assert {"deepseek_v4", "deepseek_v41", "deepseek_v32"} <= serve["--tokenizer-mode"]  # Literal + registry
    assert {"power_of_two", "round_robin", "cache_aware"} <= router["--policy"]
    assert "timed_trace" in flaglist.choices("vllm bench serve")["--dataset-name"]
    for words, match in [(["vllm", "serve", "--all2all-backend", "deepep_lowlatency"], "deepep_lowlatency"),
                         (["vllm", "serve", "--enable-eplb"], "enable-expert-parallel"),
                         (["vllm", "serve", "--data-parallel-size", "4", "--data-parallel-size-local", "8"],
                          "data-parallel-size-local")]:
        with pytest.raises(RuntimeError, match=match):
            scripts.checked("vllm serve", words)
    with pytest.raises(RuntimeError, match="api-key"):
        scripts.checked("vllm-router", ["vllm-router", "--intra-node-data-parallel-size", "8"])
    with pytest.raises(RuntimeError, match="timed_trace"):
        scripts.checked("vllm bench serve", ["vllm", "bench", "serve", "--dataset-name", "random", "--self-timed"])
    scripts.checked("vllm-router", ["vllm-router", "--intra-node-data-parallel-size", "8", "--api-key", "k"])


@pytest.mark.parametrize("case", ["seed-gb300", "h200-32gpu"])
def test_memory_share_moe_kernel_and_block_size_are_the_priced_ones(case):
    plan = load_plan(SEED if case == "seed-gb300" else H200)
    files = build(context_for(plan))
    serves = [a for n, t in files.items() if n.startswith("host-") for tool, a in commands(t) if tool == "vllm serve"]
    # no fraction in the plan: vLLM's default, 0.9 (vllm/config/cache.py), the one memory.py priced
    assert {value(a, "--gpu-memory-utilization") for a in serves} == {"0.9"}
    # V4.1: MXFP4 experts on GB300 run FlashInfer's TRT-LLM MoE (the priced kernel), 256-token KV blocks
    # (compressed attention); V3 on H200: vLLM's own block-FP8 MoE choice, default blocks
    want = ({"flashinfer_trtllm"}, {"256"}) if case == "seed-gb300" else ({"auto"}, set())
    assert {value(a, "--moe-backend") for a in serves} == want[0]
    assert {value(a, "--block-size") for a in serves if "--block-size" in a} == want[1]
    lay = dataclasses.replace(plan.decode[0], gpu_memory_utilization=0.8)
    assert engine.batch_flags(lay)[4:6] == ["--gpu-memory-utilization", "0.8"]
