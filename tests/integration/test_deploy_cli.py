"""`rackplan deploy` and `plan --report` write launch files users can run; bad plans write nothing."""
from __future__ import annotations

import re

import pytest

from rackplan.cli import main
from rackplan.specs import load_plan, plan_hash

pytestmark = pytest.mark.integration


def test_deploy_writes_launch_files_of_an_existing_plan(tmp_path, capsys):
    out = tmp_path / "launch"
    assert main(["deploy", "--plan", "v41-flash-gb300-nvl72", "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert [n for n in names if n.startswith("host-")] == [f"host-{h:02d}.sh" for h in range(18)]
    assert {"env.sh", "router.sh", "bench.sh", "bench_trace.jsonl", "README.md", "k8s"} <= set(names)
    assert "18 host scripts" in capsys.readouterr().out


def test_deploy_of_a_plan_vllm_cannot_run_writes_nothing(tmp_path, capsys):
    out = tmp_path / "launch"
    assert main(["deploy", "--plan", "tiny-cpu", "--out", str(out)]) == 2
    assert not out.exists() and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_plan_report_names_the_launch_files_and_how_to_run_them(tmp_path):
    plan_file, report = tmp_path / "h200.yaml", tmp_path / "report"
    assert main(["plan", "--model", "deepseek-v3", "--hardware", "h200-sxm", "--gpus", "32", "--workload",
                 "isl4k-osl1k", "--ttft-p90", "2s", "--tpot-p90", "50ms", "--out", str(plan_file), "--report",
                 str(report), "--workers", "1", "--quiet", "--no-simulate"]) == 0
    md = (report / "report.md").read_text()
    files = sorted(p.relative_to(report / "launch").as_posix() for p in (report / "launch").rglob("*")
                   if p.is_file() and not p.name.startswith("."))
    assert all(f"`{f}`" in md for f in files) and "host-00.sh" in md
    assert "rackplan calibrate --vllm-bench" in md and "./router.sh" in md
    # the plan hash bench.sh records is the one of the plan file as written (read_bench checks it)
    bench = (report / "launch" / "bench.sh").read_text()
    assert re.search(r"rackplan_plan_hash=(\w+)", bench).group(1) == plan_hash(load_plan(plan_file))


@pytest.mark.parametrize("target, present, absent", [
    ("scripts", {"host-00.sh", "router.sh", "env.sh", "bench.sh"}, {"k8s", "dynamo"}),
    ("llm-d", {"k8s", "env.sh", "bench.sh"}, {"host-00.sh", "router.sh", "dynamo"}),
    ("dynamo", {"dynamo", "env.sh", "bench.sh"}, {"host-00.sh", "router.sh", "k8s"}),
])
def test_each_target_writes_its_files_and_says_what_to_fill_in(tmp_path, target, present, absent):
    out = tmp_path / "launch"
    assert main(["deploy", "--plan", "v41-flash-gb300-nvl72", "--out", str(out), "--target", target]) == 0
    names = {p.name for p in out.iterdir()}
    assert present <= names and not absent & names
    md = (out / "README.md").read_text()
    sections = re.findall(r"^## (\S+): what you fill in$", md, re.M)
    assert sections == [target]
    fill = md.split("what you fill in")[1].split("\n\n")[1]
    want = {"scripts": ["`HOST_00` .. `HOST_17`", "nvidia-imex", "SOCKET_IFNAME"],
            "llm-d": ["Secret `llm-d-hf-token`", "image", "gateway", "DRA driver"],
            "dynamo": ["Secret `hf-token-secret`", "image", "frontend", "DRA driver"]}[target]
    assert all(w in fill for w in want), fill
    assert "IB_HCA" not in fill  # an NVL72 plan: no InfiniBand settings to fill in


def test_a_target_outside_the_list_is_refused(tmp_path, capsys):
    assert main(["deploy", "--plan", "v41-flash-gb300-nvl72", "--out", str(tmp_path / "x"), "--target", "k8s"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--target" in err and not (tmp_path / "x").exists()
