"""Any model the planner accepts can be deployed: an embedded model serves its own repository (or the one
--served-model names); a model outside the list needs --served-model and gets the flags its architecture
needs (engine.py ARCH_EXTRA); a repository id that is not one is refused in one line."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rackplan.cli import main
from rackplan.specs import CONFIG_DIR

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data"


def renamed_model_plan(tmp: Path, base: str, plan: Path) -> Path:
    """`plan` serving a copy of the embedded model `base` under a name rackplan.deploy does not know."""
    model = yaml.safe_load((CONFIG_DIR / "models" / f"{base}.yaml").read_text())
    model["name"] = f"my-{base}-finetune"
    (tmp / "model.yaml").write_text(yaml.safe_dump(model))
    p = yaml.safe_load(plan.read_text())
    p["model"] = str(tmp / "model.yaml")
    (tmp / "plan.yaml").write_text(yaml.safe_dump(p))
    return tmp / "plan.yaml"


def serve_args(launch: Path) -> str:
    return (launch / "host-01.sh").read_text()


def test_a_model_outside_the_list_deploys_with_its_repository(tmp_path, capsys):
    plan = renamed_model_plan(tmp_path, "deepseek-v3", DATA / "h200-dsv3-32gpu.yaml")
    out = tmp_path / "launch"
    assert main(["deploy", "--plan", str(plan), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--served-model" in err and not out.exists()
    assert main(["deploy", "--plan", str(plan), "--out", str(out), "--served-model", "acme/dsv3-ft"]) == 0
    env, host = (out / "env.sh").read_text(), serve_args(out)
    assert "MODEL=acme/dsv3-ft" in env
    assert "--trust-remote-code" in host and '"method":"mtp"' in host  # MLA family: remote code, MTP drafter
    graph = (out / "dynamo" / "graph.yaml").read_text()
    assert "acme/dsv3-ft" in graph and "deepseek-ai/DeepSeek-V3" not in graph


def test_an_embedded_model_can_serve_another_repository(tmp_path):
    out = tmp_path / "launch"
    assert main(["deploy", "--plan", str(DATA / "h200-dsv3-32gpu.yaml"), "--out", str(out),
                 "--served-model", "deepseek-ai/DeepSeek-V3-0324"]) == 0
    assert "MODEL=deepseek-ai/DeepSeek-V3-0324" in (out / "env.sh").read_text()


def test_a_compressed_attention_model_gets_v4_tokenizer_and_block_size(tmp_path):
    plan = renamed_model_plan(tmp_path, "deepseek-v4-flash", CONFIG_DIR / "plans" / "v41-flash-gb300-nvl72.yaml")
    out = tmp_path / "launch"
    assert main(["deploy", "--plan", str(plan), "--out", str(out), "--served-model", "acme/v4-ft"]) == 0
    host = (out / "host-02.sh").read_text()
    assert "--tokenizer-mode deepseek_v4" in host and "--block-size 256" in host


@pytest.mark.parametrize("repo", ["acme/$(touch x)", "not-a-repo", "a/b\nc", "acme/../etc"])
def test_a_served_model_that_is_not_a_repository_id_is_refused(tmp_path, capsys, repo):
    out = tmp_path / "launch"
    assert main(["deploy", "--plan", str(DATA / "h200-dsv3-32gpu.yaml"), "--out", str(out),
                 "--served-model", repo]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1 and not out.exists()


# the models shipped from their config.json (issue 43): repository, and a flag their family needs (or None)
SHIPPED = {"deepseek-v4-pro": ("deepseek-ai/DeepSeek-V4-Pro", "--tokenizer-mode deepseek_v4"),
           "kimi-k2": ("moonshotai/Kimi-K2-Instruct", "--trust-remote-code"),
           "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", None),
           "qwen3-coder-480b-a35b": ("Qwen/Qwen3-Coder-480B-A35B-Instruct", None),
           "glm-4.5": ("zai-org/GLM-4.5", None),
           "gpt-oss-120b": ("openai/gpt-oss-120b", None)}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_each_shipped_new_model_deploys_with_its_repository(name, tmp_path):
    """A plan of each new model (the H200 DEP8 prefill + DEP16 decode with MTP-1 test plan, its model
    replaced) deploys without --served-model: its repository, its family's flags, and an MTP drafter
    where the model has one (GLM-4.5, V4-Pro; the others' decode speculation is dropped by the spec)."""
    p = yaml.safe_load((DATA / "h200-dsv3-32gpu.yaml").read_text())
    p["model"] = name
    from rackplan.specs import load_model

    if load_model(name).draft is None:
        p["decode"][0]["speculation"] = None
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(p))
    out = tmp_path / "launch"
    assert main(["deploy", "--plan", str(tmp_path / "plan.yaml"), "--out", str(out)]) == 0
    repo, flag = SHIPPED[name]
    assert f"MODEL={repo}" in (out / "env.sh").read_text()
    hosts = "".join(f.read_text() for f in sorted(out.glob("host-*.sh")))
    assert flag is None or flag in hosts
    assert ('"method":"mtp"' in hosts) == (load_model(name).draft is not None)
