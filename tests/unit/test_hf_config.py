"""A ModelSpec from a Hugging Face config.json (rackplan/specs/hf_config.py): the round trip against the
hand-written specs, the config's ways in (path, folder, cached repo id), the refusals, the dtypes the
quantisation block sets and the MTP drafter derived by hand."""
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from rackplan.cli import main
from rackplan.specs import SpecError, load_model, spec_ref, to_dict
from rackplan.specs.hf_config import load_config_spec, spec_from_config

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
V3_CONFIG = DATA / "deepseek-ai--DeepSeek-V3" / "config.json"


def config(repo: str) -> dict:
    return json.loads((DATA / repo / "config.json").read_text())


def without(tree: dict, *paths: str) -> dict:
    """`tree` with the dotted `paths` removed (the fields compared apart)."""
    tree = json.loads(json.dumps(tree))
    for path in paths:
        *head, last = path.split(".")
        node = tree
        for key in head:
            node = node[key]
        node.pop(last)
    return tree


# --- the round trip: the embedded specs rebuilt from their published config.json -----------------

@pytest.mark.parametrize("name,repo", [("qwen3-235b-a22b", "Qwen--Qwen3-235B-A22B"),
                                       ("deepseek-v3", "deepseek-ai--DeepSeek-V3"),
                                       ("deepseek-v3.2", "deepseek-ai--DeepSeek-V3.2"),
                                       ("deepseek-v4-flash", "deepseek-ai--DeepSeek-V4-Flash")])
def test_embedded_spec_equals_the_one_built_from_its_config(name, repo):
    """Every field equal, but `source` (the YAML cites its own) and the MTP drafter's parameter
    counts and dtype: config.json gives the drafter's shape, from which hf_config derives them
    (test_v3_mtp_drafter_derived_by_hand); the V3 / V3.2 YAMLs hold DeepSeek's published 11.5B / 2.4B,
    V4-Flash's its own estimate (0.5B active, 7B total, FP8); every YAML's expert_params is the
    expert's 3 x hidden x moe_intermediate to 4 digits."""
    hand, built = to_dict(load_model(name)), to_dict(load_config_spec(DATA / repo / "config.json"))
    drafts = ("draft.active_params", "draft.total_params", "draft.expert_params", "draft.weight_dtype")
    drafts = drafts if hand.get("draft") else ()
    assert without(built, "source", *drafts) == without(hand, "source", *drafts)
    if drafts:
        assert hand["draft"]["expert_params"] == pytest.approx(built["draft"]["expert_params"], rel=1e-3)


def test_v3_mtp_drafter_derived_by_hand():
    """One MTP layer of DeepSeek-V3: MLA projections q_a 7168x1536 + q_b 1536x(128x192) + kv_a 7168x576
    + kv_b 512x(128x256) + o (128x128)x7168 = 187,105,280; router 7168 x 256; one shared expert and
    eh_proj (2 x 7168) x 7168; 256 routed experts of 3 x 7168 x 2048 (unique); a pass reads top-8 of
    them and the shared head (129,280 x 7168) whole, the shared embedding by rows only."""
    d = load_config_spec(V3_CONFIG).draft
    attn, expert, router, eh = 187_105_280, 44_040_192, 7168 * 256, 2 * 7168 * 7168
    assert d.total_params == attn + router + expert + eh + 256 * expert == 11_610_030_080
    assert d.active_params == attn + router + expert + eh + 8 * expert + 129_280 * 7168 == 1_614_741_504
    assert (d.kind, d.num_tokens, d.forward_passes, d.num_experts, d.top_k) == ("mtp", 1, 1, 256, 8)
    assert d.weight_dtype == "fp8_block"
    # README_WEIGHTS.md publishes 11.5B unique (the derivation is 1.0% above) and 2.4B active with the
    # 0.9B embedding and 0.9B head counted whole (1.5B without the embedding: the derivation is 7.6%
    # above); the hand-written YAML keeps the published 11.5B / 2.4B
    assert d.total_params / 11.5e9 - 1 == pytest.approx(0.0096, abs=5e-4)


# --- the ways to name a config ------------------------------------------------------------------------

def test_path_folder_and_cached_repo_id_give_one_spec(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--deepseek-ai--DeepSeek-V3" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    shutil.copy(V3_CONFIG, snap / "config.json")
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    by_repo = load_model("deepseek-ai/DeepSeek-V3")
    assert by_repo.source == "deepseek-ai/DeepSeek-V3 config.json (revision abc123)"
    by_folder = load_model(str(V3_CONFIG.parent))
    assert by_folder.source == "deepseek-ai/DeepSeek-V3 config.json" and by_folder == load_model(str(V3_CONFIG))
    assert dataclasses.replace(by_repo, source="") == dataclasses.replace(by_folder, source="")
    assert by_repo.name == "deepseek-v3"
    # a plan names the snapshot it was made from, absolute, which loads back
    ref = spec_ref("models", "deepseek-ai/DeepSeek-V3")
    assert ref == str((snap / "config.json").resolve()) and load_model(ref) == by_repo


def test_repo_id_absent_from_the_cache_is_refused_not_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(SpecError, match="'model'.*local cache.*never downloaded"):
        load_model("moonshotai/Kimi-K2-Instruct")


# --- refusals: named, never guessed ------------------------------------------------------------------

@pytest.mark.parametrize("repo,change,field", [
    ("deepseek-ai--DeepSeek-V3", {"model_type": "llama"}, "model_type"),
    ("deepseek-ai--DeepSeek-V3", {"use_flash_router": True}, "use_flash_router"),
    ("deepseek-ai--DeepSeek-V3", {"tie_word_embeddings": True}, "tie_word_embeddings"),
    ("deepseek-ai--DeepSeek-V3", {"moe_layer_freq": 2}, "moe_layer_freq"),
    ("deepseek-ai--DeepSeek-V3", {"scoring_func": "relu"}, "scoring_func"),
    ("deepseek-ai--DeepSeek-V3", {"quantization_config": {"quant_method": "gptq"}},
     "quantization_config.quant_method"),
    ("deepseek-ai--DeepSeek-V3", {"quantization_config": {"quant_method": "fp8", "weight_block_size": [1, 128]}},
     "quantization_config.weight_block_size"),
    ("deepseek-ai--DeepSeek-V3", {"n_group": 7}, "num_groups"),
    ("deepseek-ai--DeepSeek-V3", {"hidden_size": -1}, "hidden_size"),
    ("Qwen--Qwen3-235B-A22B", {"mlp_only_layers": [0, 1]}, "mlp_only_layers"),
    ("Qwen--Qwen3-235B-A22B", {"use_sliding_window": True}, "use_sliding_window"),
    ("Qwen--Qwen3-235B-A22B", {"torch_dtype": "float64"}, "torch_dtype"),
    ("openai--gpt-oss-120b", {"layer_types": ["full_attention"] * 3}, "layer_types"),
    ("deepseek-ai--DeepSeek-V4-Pro", {"compress_ratios": [4, 16] * 31}, "compress_ratios"),
])
def test_unsupported_values_are_named(repo, change, field):
    with pytest.raises(SpecError) as err:
        spec_from_config({**config(repo), **change}, "config.json", "m")
    assert field in err.value.field


def test_cli_refuses_in_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**config("deepseek-ai--DeepSeek-V3"), "attn_logit_softcapping": 30.0}))
    assert main(["models", "--from", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "'attn_logit_softcapping'" in err


# --- `models --from`: the printed spec saves and loads back -------------------------------------------

@pytest.mark.parametrize("repo", sorted(p.name for p in DATA.iterdir() if p.is_dir()))
def test_models_from_prints_yaml_that_loads_back(repo, tmp_path, capsys):
    assert main(["models", "--from", str(DATA / repo)]) == 0
    saved = tmp_path / "spec.yaml"
    saved.write_text(capsys.readouterr().out)
    assert load_model(str(saved)) == load_config_spec(DATA / repo / "config.json")


def test_models_from_json(capsys):
    assert main(["models", "--from", str(V3_CONFIG), "--json"]) == 0
    from rackplan.specs import ModelSpec, from_dict

    assert from_dict(ModelSpec, json.loads(capsys.readouterr().out)) == load_config_spec(V3_CONFIG)


# --- the quantisation block sets the dtypes ----------------------------------------------------------

def test_fp8_block_checkpoint():
    dt = load_config_spec(DATA / "moonshotai--Kimi-K2-Instruct" / "config.json").dtypes
    assert (dt.attention_weights, dt.expert_weights, dt.dense_weights) == ("fp8_block",) * 3
    assert (dt.kv_cache, dt.dispatch, dt.combine, dt.compute) == ("fp8", "fp8", "bf16", "fp8")


def test_mxfp4_experts_with_modules_kept_bf16():
    """gpt-oss keeps self_attn, the router, embeddings and head in BF16 (modules_to_not_convert)."""
    dt = load_config_spec(DATA / "openai--gpt-oss-120b" / "config.json").dtypes
    assert (dt.attention_weights, dt.expert_weights, dt.compute, dt.kv_cache) == ("bf16", "mxfp4", "bf16", "bf16")
    assert dt.expert_compute is None  # BF16 activations: the FP4 experts run in BF16


def test_nvfp4_from_a_modelopt_hf_quant_config(tmp_path):
    """A ModelOpt checkpoint's hf_quant_config.json beside config.json: NVFP4 everywhere but the
    excluded attention, an FP8 KV cache, FP4 expert GEMMs."""
    (tmp_path / "config.json").write_text(json.dumps(config("deepseek-ai--DeepSeek-V3")
                                                     | {"quantization_config": None}))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {
        "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
        "exclude_modules": ["lm_head", "model.layers.*.self_attn*", "model.layers.*.mlp.gate"]}}))
    dt = load_config_spec(tmp_path / "config.json").dtypes
    assert (dt.attention_weights, dt.expert_weights, dt.dense_weights) == ("bf16", "nvfp4", "nvfp4")
    assert (dt.kv_cache, dt.dispatch, dt.compute, dt.expert_compute) == ("fp8", "fp8", "bf16", "fp4")


def test_bf16_checkpoint_serves_bf16():
    dt = load_config_spec(DATA / "Qwen--Qwen3-30B-A3B" / "config.json").dtypes
    assert set(dataclasses.asdict(dt).values()) - {None} == {"bf16"}


# --- architecture details --------------------------------------------------------------------------------

def test_gpt_oss_alternates_sliding_and_full_layers():
    """36 layers, layer_types alternating: 18 with a 128-token window, 18 full; K and V of 8 heads x
    64 in BF16 = 2,048 B per entry; only the full layers grow with context."""
    m = load_config_spec(DATA / "openai--gpt-oss-120b" / "config.json")
    swa, full = m.attention.kv
    assert (swa.layers, swa.window, full.layers, full.window) == (18, 128, 18, None)
    assert m.kv_bytes_per_token == 18 * 2048 and m.kv_bytes_per_sequence_fixed == 18 * 2048 * 128


def test_v4_pro_compress_ratios_split_the_layers():
    """compress_ratios over the 61 layers: 128, 128, then 4 / 128 alternating from layer 2 -> 30 CSA
    (ratio 4) and 31 HCA (ratio 128) layers; every layer keeps its 128-token window (the 62nd
    entry belongs to the MTP layer)."""
    m = load_config_spec(DATA / "deepseek-ai--DeepSeek-V4-Pro" / "config.json")
    comps = {c.name: c for c in m.attention.kv}
    assert (comps["swa"].layers, comps["csa"].layers, comps["hca"].layers) == (61, 30, 31)
    assert (comps["csa"].topk, comps["swa"].window, m.hc_mult) == (1024, 128, 4)
    assert (m.dtypes.expert_weights, m.dtypes.attention_weights, m.dtypes.kv_cache) == ("mxfp4", "fp8_block", "bf16")


def test_spec_name_from_an_odd_folder_is_plain(tmp_path):
    folder = tmp_path / "My Model; $(x)"
    folder.mkdir()
    shutil.copy(V3_CONFIG, folder / "config.json")
    assert load_model(str(folder)).name == "my-model-x"


ODD_VALUES = [None, "x", [], {}, [1, "a"], [{}], -1, 0, 1.5, 2**60, True, float("inf")]


@pytest.mark.parametrize("repo", sorted(p.name for p in DATA.iterdir() if p.is_dir()))
def test_any_odd_value_is_a_spec_error_or_a_spec(repo):
    """Every key of every shipped config set to each odd value: a ModelSpec or one SpecError naming a
    field, never another exception (a TypeError from a list where a number belongs, an overflow)."""
    base = config(repo)
    for key in base:
        for value in ODD_VALUES:
            try:
                spec_from_config({**base, key: value}, "config.json", "m")
            except SpecError as exc:
                assert exc.field, (key, value)
