"""Names from input files never run as shell and always give valid Kubernetes names (issue 36 causes 1-2,
issue 37 item 6): a plan, workload or hardware name with a newline is refused in one line (exit 2, no
files); one with `$()`, backquotes, quotes or 200 characters gives scripts in which it is inert. The
generated scripts are run with stub `vllm` / `vllm-router` executables on PATH that record their
arguments; an injected `touch` would leave a canary file."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from rackplan.cli import main
from rackplan.specs import CONFIG_DIR

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data"
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
STUB = """#!/usr/bin/env bash
# stand-in for {tool}: records its arguments (one per line, NUL-free), then exits
printf '%s\\n' "$@" >> "$STUB_LOG/{tool}.args"
echo "---" >> "$STUB_LOG/{tool}.args"
"""


def hostile(canary: Path) -> dict[str, str]:
    return {"command-substitution": f"x$(touch {canary})y",
            "backquotes": f"x`touch {canary}`y",
            "quotes-and-semicolon": f"a'b\"c; touch {canary}; ${{HOME}}",
            "200-characters": "Plan-" + "n" * 195}


def specs(tmp: Path, field: str, name: str) -> Path:
    """The H200 32-GPU plan with `field` ('plan', 'workload' or 'hardware') renamed to `name`; the
    workload and hardware are copies given by path."""
    plan = yaml.safe_load((DATA / "h200-dsv3-32gpu.yaml").read_text())
    wl = yaml.safe_load((CONFIG_DIR / "workloads" / "isl4k-osl1k.yaml").read_text())
    hw = yaml.safe_load((CONFIG_DIR / "hardware" / "h200-sxm.yaml").read_text())
    {"plan": plan, "workload": wl, "hardware": hw}[field]["name"] = name
    wl["num_requests"] = 20
    for obj, fname in ((wl, "wl.yaml"), (hw, "hw.yaml")):
        (tmp / fname).write_text(yaml.safe_dump(obj))
    plan.update(workload=str(tmp / "wl.yaml"), hardware=str(tmp / "hw.yaml"))
    (tmp / "plan.yaml").write_text(yaml.safe_dump(plan))
    return tmp / "plan.yaml"


def run_scripts(launch: Path, tmp: Path) -> dict[str, str]:
    """Run env.sh, every host script, router.sh and bench.sh with stubs first on PATH."""
    stubs, log = tmp / "bin", tmp / "stublog"
    stubs.mkdir()
    log.mkdir()
    for tool in ("vllm", "vllm-router"):
        (stubs / tool).write_text(STUB.format(tool=tool))
        (stubs / tool).chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_LOG": str(log), "HOME": str(tmp)}
    names = ["env.sh", *sorted(p.name for p in launch.glob("host-*.sh")), "router.sh", "bench.sh"]
    for name in names:
        r = subprocess.run(["bash", str(launch / name)], env=env, cwd=tmp, capture_output=True, text=True)
        assert r.returncode == 0, (name, r.stderr)
    return {p.stem: p.read_text() for p in log.iterdir()}


@pytest.mark.parametrize("field", ["plan", "workload", "hardware"])
@pytest.mark.parametrize("case", ["command-substitution", "backquotes", "quotes-and-semicolon", "200-characters"])
def test_a_hostile_name_is_inert_in_every_script(tmp_path, field, case):
    canary = tmp_path / "canary"
    name = hostile(canary)[case]
    launch = tmp_path / "launch"
    assert main(["deploy", "--plan", str(specs(tmp_path, field, name)), "--out", str(launch)]) == 0
    ran = run_scripts(launch, tmp_path)
    assert not canary.exists()
    assert set(ran) == {"vllm", "vllm-router"}
    serves = ran["vllm"].count("\nserve\n") + ran["vllm"].startswith("serve\n")
    assert serves == len(list(launch.glob("host-*.sh"))) + 1  # one vllm serve per host, one vllm bench serve
    if field == "plan":  # bench.sh records the plan name, character for character
        assert f"rackplan_plan={name}\n" in ran["vllm"]
    if field == "workload":
        assert f"rackplan_workload={name}\n" in ran["vllm"]


@pytest.mark.parametrize("field", ["plan", "workload", "hardware"])
@pytest.mark.parametrize("bad", ["two\nlines", "carriage\rreturn", "esc\x1b[2Jape", "line\u2028separator"])
def test_a_name_with_control_characters_is_refused_in_one_line(tmp_path, capsys, field, bad):
    launch = tmp_path / "launch"
    assert main(["deploy", "--plan", str(specs(tmp_path, field, bad)), "--out", str(launch)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{field} name" in err and "control characters" in err
    assert not launch.exists()


@pytest.mark.parametrize("name", ["Plan-" + "n" * 195, "Plan-" + "n" * 195 + "-other", "9-starts-with-digit",
                                  "UPPER_and.dots", "ends-with-dash-" + "-" * 60, "$()"])
def test_kubernetes_names_are_valid_unique_and_stable(tmp_path, name):
    docs = []
    for run in ("a", "b"):
        launch = tmp_path / run
        (tmp_path / run).mkdir()
        assert main(["deploy", "--plan", str(specs(tmp_path / run, "plan", name)), "--out", str(launch / "out")]) == 0
        docs.append(list(yaml.safe_load_all((launch / "out" / "k8s" / "modelserver.yaml").read_text())))
    names = [d["metadata"]["name"] for d in docs[0] if d["kind"] == "LeaderWorkerSet"]
    assert len(names) == 2 and len(set(names)) == 2  # prefill and decode
    assert all(DNS_LABEL.match(n) and len(n) <= 40 for n in names), names
    assert names == [d["metadata"]["name"] for d in docs[1] if d["kind"] == "LeaderWorkerSet"]  # stable


def test_distinct_long_names_keep_distinct_kubernetes_names():
    from rackplan.deploy.safe import dns_label

    a, b = "p" * 200 + "-prefill0", "p" * 200 + "-decode0"
    assert dns_label(a) != dns_label(b) and dns_label(a) == dns_label(a)
    assert dns_label("short-ok") == "short-ok"  # a valid name is kept as it is
