"""Write the vLLM launch files of an existing plan (no re-planning).

Example:
  rackplan deploy --plan configs/plans/v41-flash-gb300-nvl72.yaml --out launch/
writes env.sh, one host-NN.sh per host, router.sh, bench.sh + bench_trace.jsonl, the llm-d
Kubernetes manifests and a Dynamo graph (`--target` picks one; launch/README.md says how to run
them). Nothing is written unless every file builds; an existing --out folder is replaced only if
rackplan wrote it.
"""
from __future__ import annotations

import argparse
import json

from rackplan.specs import load_plan


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", required=True, help="plan to deploy (name under configs/plans or a YAML path)")
    p.add_argument("--out", required=True, help="folder for the launch files")
    p.add_argument("--workload", help="workload bench.sh replays (default: the plan's)")
    p.add_argument("--target", default="all", choices=["scripts", "llm-d", "dynamo", "all"],
                   help="what to write: bare-host scripts, llm-d manifests, a Dynamo graph, or all (default)")
    p.add_argument("--served-model", help="Hugging Face repository to serve (owner/name); required for a model "
                   "outside the embedded list, which then gets the flags of its architecture")
    p.add_argument("--force", action="store_true", help="replace --out even if it holds other files")
    p.add_argument("--json", action="store_true", help="print the written files as JSON")


def run(args: argparse.Namespace) -> int:
    from . import check_launch_folder, context_for, write_launch

    check_launch_folder(args.out, args.force)
    plan = load_plan(args.plan)
    cx = context_for(plan, workload=args.workload, served_model=args.served_model)
    paths = write_launch(cx, args.out, args.force, args.target)
    if args.json:
        print(json.dumps({"plan": plan.name, "files": [str(p) for p in paths]}, indent=2))
        return 0
    hosts = sum(1 for p in paths if p.name.startswith("host-"))
    parts = {"scripts": f"{hosts} host scripts, router.sh", "llm-d": "k8s/", "dynamo": "dynamo/"}
    what = ", ".join(v for k, v in parts.items() if args.target in (k, "all"))
    print(f"deploy: {plan.summary} -> {args.out}/ ({what}, bench.sh); see {args.out}/README.md")
    return 0
