"""Deployment output for a plan: what runs it on real hosts with vLLM, and benchmarks it.

launch/
  README.md             how to run the files below, in order
  env.sh                model and host addresses every script reads
  host-NN.sh            one per host: its `vllm serve` processes (GPUs, DP ranks, ports)
  router.sh             vllm-router in front (P/D mode for a disaggregated plan)
  bench.sh              `vllm bench serve` at the planned load -> detailed result JSON
  bench_trace.jsonl     the planned requests (timed trace) bench.sh replays
  k8s/modelserver.yaml  llm-d wide-EP LeaderWorkerSets (one per layout) [+ ComputeDomain on NVL72]
  k8s/inferencepool.values.yaml  Helm values for the llm-d inference scheduler's InferencePool
  dynamo/graph.yaml     NVIDIA Dynamo DynamoGraphDeployment [+ ComputeDomain on NVL72]
`--target scripts | llm-d | dynamo` writes one target's files (with env.sh and bench.sh); `all`, every one.
Modules: engine.py (flags per instance), placement.py (hosts, GPUs, ranks, ports), fabric.py (settings per
hardware fabric), policies.py (router policy per target), safe.py (quoting, refusal, Kubernetes names),
scripts.py (shell files), bench.py, k8s.py (llm-d), dynamo.py, flaglist.py (the kept vLLM flag list).
"""
from __future__ import annotations

from pathlib import Path

from rackplan.specs import Plan, SpecError, load_hardware, load_model, load_workload

from .engine import FAMILIES, Context, servable
from .readme import how_to_run

__all__ = ["FAMILIES", "TARGETS", "Context", "context_for", "build", "write", "write_launch", "how_to_run",
           "servable"]
MARKER = ".rackplan-launch"  # marks a folder this module wrote (and may replace)


def context_for(plan: Plan, workload: str | None = None, served_model: str | None = None) -> Context:
    """Specs a plan's launch files depend on, loaded by name (no cost profile: launch files price nothing);
    `served_model` names the Hugging Face repository to serve (required for a model outside FAMILIES)."""
    wl = workload or plan.workload
    if wl is None:
        raise SpecError("", "workload", "a workload (the plan names none; pass --workload)")
    return Context(plan, load_model(plan.model), load_hardware(plan.hardware), load_workload(wl), served_model)


TARGETS = ("scripts", "llm-d", "dynamo")  # `all` writes every one


def build(cx: Context, target: str = "all") -> dict[str, str]:
    """Every launch file of `target` (scripts | llm-d | dynamo | all) as {relative path: text}; raises
    SpecError before anything is written. bench.sh, its trace and env.sh come with every target."""
    from . import bench, dynamo, k8s, scripts
    from .placement import place
    from .safe import check_inputs

    if target != "all" and target not in TARGETS:
        raise SpecError("", "--target", "one of " + ", ".join((*TARGETS, "all")), target)
    pl = place(cx.plan, cx.hw)
    check_inputs(cx)
    wanted = TARGETS if target == "all" else (target,)
    trace = bench.trace_lines(cx)
    files = {"env.sh": scripts.env_script(pl, cx, hosts="scripts" in wanted)}
    if "scripts" in wanted:
        files.update({f"host-{h:02d}.sh": scripts.host_script(h, pl, cx) for h in range(pl.num_hosts)
                      if pl.on_host(h)})
        files["router.sh"] = scripts.router_script(pl, cx)
    files["bench.sh"] = bench.bench_script(cx, len(trace))
    files["bench_trace.jsonl"] = "\n".join(trace) + "\n"
    if "llm-d" in wanted:
        files["k8s/modelserver.yaml"] = k8s.dump(k8s.manifests(pl, cx))
        files["k8s/inferencepool.values.yaml"] = k8s.dump([k8s.inferencepool_values(cx)])
    if "dynamo" in wanted:
        files["dynamo/graph.yaml"] = k8s.dump(dynamo.manifests(pl, cx))
    from .readme import readme

    files["README.md"] = readme(pl, cx, sorted(files), wanted)
    return files


def check_launch_folder(folder: str | Path, force: bool = False) -> None:
    """A launch folder is new, empty, an earlier launch folder (it holds MARKER: regenerated whole)
    or replaced with `force`; a folder of other files is a SpecError."""
    from rackplan.args import check_writable

    check_writable("--out", folder, folder=True)
    folder = Path(folder)
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MARKER).exists() and not force:
        raise SpecError(str(folder), "--out", "an empty folder or one that holds rackplan launch files (pass "
                        "--force to replace it)")


def write(files: dict[str, str], folder: str | Path, force: bool = False) -> list[Path]:
    """Write `files` under `folder` all at once (rackplan/outputs.py: a temporary sibling renamed
    into place); a folder holding other files than an earlier launch folder needs `force`."""
    from rackplan.outputs import Outputs

    folder = Path(folder)
    check_launch_folder(folder, force)
    files = {**files, MARKER: "launch files written by rackplan; this folder is replaced when regenerated\n"}
    with Outputs() as out:
        tmp = out.folder(folder, replace=True)  # a launch folder is regenerated whole
        for rel, text in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            if rel.endswith(".sh"):
                p.chmod(0o755)
    return [folder / rel for rel in sorted(files) if rel != MARKER]


def write_launch(cx: Context, folder: str | Path, force: bool = False, target: str = "all") -> list[Path]:
    """Build and write the launch folder of `cx.plan` for `target`; returns the written paths."""
    return write(build(cx, target), folder, force)
