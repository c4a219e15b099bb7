"""A ModelSpec from a Hugging Face config.json: the one translation from published configs to specs.

`--model` takes a config.json path, a folder holding one, or a repo id (`org/name`) found in the
local Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub); nothing is ever
downloaded. Each supported `model_type` lists the keys it reads and the keys that cannot change a
cost (token ids, RoPE, norms' epsilon, ...); any other key is refused by name (exit 2), as is a
value the spec cannot express (tied embeddings, sparse-step MoE, ...), so nothing is guessed.

What config.json does not say comes from one stated rule each (the "defaults" below):
- KV cache, dispatch and GEMM compute follow the weights: an FP8 checkpoint serves an FP8 KV cache,
  FP8 dispatch and FP8 GEMMs, a BF16 one BF16 throughout (the hand-written deepseek-v3 / qwen3-235b
  specs); the combine is BF16 (DeepEP); DeepSeek-V4 keeps BF16 latents (deepseek-v4-flash.yaml).
- MLA caches its 512 + 64 latent; the V3.2 sparse cache is vLLM's FP8 layout: 512 FP8 + one FP32
  scale per 128 + the 64-d rope in BF16 = 656 B, indexer keys 128 FP8 + one FP32 scale = 132 B
  (configs/models/deepseek-v3.2.yaml cites the engines).
- An MTP layer (num_nextn_predict_layers) is one decoder layer with the target's MoE plus the 2h x h
  `eh_proj`; a pass also reads the shared head whole (in its active parameters) and the shared
  embedding by rows (not counted: DeepSeek's README_WEIGHTS.md counts it whole in its 2.4B); its one
  weight dtype is the attention's (a pass reads mostly attention, eh_proj and head).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
from pathlib import Path
from typing import Any, Literal, Optional, cast

from .fields import MAX_INT, SpecError
from .model import AttentionSpec, DraftSpec, Dtype, Dtypes, KVComponent, ModelSpec, MoESpec

REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")

# Keys that cannot change what rackplan prices (numerics, token ids, RoPE, bookkeeping).
_INERT = {
    "architectures", "auto_map", "attention_dropout", "bos_token_id", "eos_token_id", "pad_token_id",
    "initializer_range", "max_position_embeddings", "rms_norm_eps", "rope_scaling", "rope_theta",
    "torch_dtype", "transformers_version", "use_cache", "model_type", "aux_loss_alpha", "seq_aux",
    "router_aux_loss_coef", "output_router_logits", "norm_topk_prob", "topk_method", "ep_size",
    "pretraining_tp", "quantization_config", "_name_or_path", "dtype", "qkv_bias",
    "attention_bias", "use_qk_norm", "partial_rotary_factor", "max_window_layers", "rope_parameters",
}
# Keys whose value must be the one the spec expresses (key -> accepted values), for every family
# and for Qwen3-MoE (whose config carries switches for layouts the released models do not use).
_REQUIRED_VALUES = {"tie_word_embeddings": (False,), "hidden_act": ("silu",), "moe_layer_freq": (1,)}
_QWEN3_VALUES = {"decoder_sparse_step": (1,), "mlp_only_layers": ([],), "use_sliding_window": (False,),
                 "sliding_window": (None,), "shared_expert_intermediate_size": (0,)}
_MLA = {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "num_key_value_heads"}
_DEEPSEEK_MOE = {"n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "first_k_dense_replace", "intermediate_size", "n_group", "topk_group", "routed_scaling_factor",
                 "scoring_func", "num_nextn_predict_layers", "moe_layer_freq"}
_COMMON = {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "tie_word_embeddings",
           "hidden_act"}
_FAMILY_KEYS = {
    "deepseek_v3": _COMMON | _MLA | _DEEPSEEK_MOE,
    "kimi_k2": _COMMON | _MLA | _DEEPSEEK_MOE,
    "deepseek_v32": _COMMON | _MLA | _DEEPSEEK_MOE | {"index_head_dim", "index_n_heads", "index_topk"},
    "qwen3_moe": _COMMON | {"head_dim", "num_key_value_heads", "num_experts", "num_experts_per_tok",
                            "moe_intermediate_size", "intermediate_size", "decoder_sparse_step", "mlp_only_layers",
                            "use_sliding_window", "sliding_window", "shared_expert_intermediate_size"},
    "glm4_moe": _COMMON | _DEEPSEEK_MOE | {"head_dim", "num_key_value_heads"},
    "gpt_oss": _COMMON | {"head_dim", "num_key_value_heads", "num_local_experts", "num_experts_per_tok",
                          "experts_per_token", "intermediate_size", "layer_types", "sliding_window",
                          "swiglu_limit", "initial_context_length"},
    "deepseek_v4": _COMMON | _DEEPSEEK_MOE | {
        "head_dim", "num_key_value_heads", "q_lora_rank", "qk_rope_head_dim", "o_lora_rank", "o_groups",
        "index_head_dim", "index_n_heads", "index_topk", "compress_ratios", "compress_rope_theta", "sliding_window",
        "hc_mult", "hc_eps", "hc_sinkhorn_iters", "num_hash_layers", "expert_dtype", "swiglu_limit"},
}
SUPPORTED = tuple(sorted(_FAMILY_KEYS))


class _Config:
    """A config.json mapping whose reads name the file and key on error."""

    def __init__(self, data: dict, where: str):
        self.data, self.where = data, where

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def int(self, key: str, default: Optional[int] = None) -> int:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
            raise SpecError(self.where, key, f"an integer in 0..{MAX_INT}", value)
        return value

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e6:
            raise SpecError(self.where, key, "a positive number below 1e6", value)
        return float(value)

    def strings(self, key: str, allowed: tuple = ()) -> list:
        """A list of strings (each one of `allowed` when given)."""
        value = self.data.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) and (not allowed or v in allowed)
                                                   for v in value):
            raise SpecError(self.where, key, "a list of " + (" / ".join(allowed) if allowed else "strings"), value)
        return value

    def fail(self, key: str, expected: str) -> SpecError:
        return SpecError(self.where, key, expected, self.data.get(key))


# --- locating a config ----------------------------------------------------------------------------

def hub_dirs() -> list[Path]:
    """Where a Hugging Face cache may hold repos, in the order huggingface_hub looks."""
    if os.environ.get("HF_HUB_CACHE"):
        return [Path(os.environ["HF_HUB_CACHE"])]
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return [Path(home).expanduser() / "hub"]


def cached_config(repo_id: str) -> Optional[Path]:
    """config.json of `repo_id` in the local cache: the snapshot refs/main names, else the only one."""
    for hub in hub_dirs():
        repo = hub / ("models--" + repo_id.replace("/", "--"))
        ref = repo / "refs" / "main"
        snaps = [repo / "snapshots" / ref.read_text().strip()] if ref.is_file() else \
            sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)[-1:]
        for snap in snaps:
            if (snap / "config.json").is_file():
                return snap / "config.json"
    return None


def config_file(ref: str | Path) -> Optional[Path]:
    """The config.json a `--model` value names (a .json path, a folder with config.json, a cached repo
    id), or None when it names something else (an embedded spec or a YAML file)."""
    p = Path(ref)
    if p.suffix == ".json":
        return p
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise SpecError(str(p), "model", "a folder holding config.json")
        return p / "config.json"
    if not p.exists() and REPO_ID.fullmatch(str(ref)):
        found = cached_config(str(ref))
        if found is None:
            raise SpecError("", "model", "an embedded model name, a YAML or config.json path, or a Hugging Face "
                            "repo id present in the local cache (never downloaded; looked in "
                            f"{', '.join(str(h) for h in hub_dirs())})", str(ref))
        return found
    return None


def repo_of(path: Path) -> Optional[str]:
    """ORG/NAME of a config.json kept in a cache folder (models--ORG--NAME/snapshots/REV/) or in a
    folder named ORG--NAME (tests/data/hf_configs/), else None."""
    parts = Path(path).resolve().parts
    folder = next((p[len("models--"):] for p in reversed(parts) if p.startswith("models--")),
                  parts[-2] if len(parts) > 1 else "")
    return folder.replace("--", "/", 1) if "--" in folder else None


def model_name(path: Path) -> str:
    """A spec name for a config.json: its repo's name, else its folder's name, lower case."""
    repo = repo_of(path)
    name = (repo.split("/")[-1] if repo else Path(path).resolve().parent.name).lower()
    return re.sub(r"[^a-z0-9._-]+", "-", name).strip("-._") or "model"  # names reach file names and reports


# --- translation ------------------------------------------------------------------------------------

def spec_from_config(data: dict, where: str, name: str, source: str = "",
                     quant: Optional[dict] = None) -> ModelSpec:
    """ModelSpec of one config.json mapping (`quant`: an hf_quant_config.json beside it, if any)."""
    if not isinstance(data, dict):
        raise SpecError(where, "(top level)", "a JSON object (config.json)", type(data).__name__)
    cfg = _Config(data, where)
    family = data.get("model_type")
    if not isinstance(family, str) or family not in _FAMILY_KEYS:
        raise cfg.fail("model_type", "one of the architectures rackplan translates: " + ", ".join(SUPPORTED))
    _check_keys(cfg, family)
    dtypes = _dtypes(cfg, family, quant)
    build = {"deepseek_v3": _deepseek, "kimi_k2": _deepseek, "deepseek_v32": _deepseek, "glm4_moe": _deepseek,
             "qwen3_moe": _qwen3, "gpt_oss": _gpt_oss, "deepseek_v4": _deepseek_v4}[family]
    try:
        return build(cfg, family, dtypes, name, source or where)
    except SpecError as exc:  # a spec range check on a translated value: name the config it came from
        if exc.where:
            raise
        raise SpecError(where, f"(the spec built from it) {exc.field}", exc.expected) from None


def _check_keys(cfg: _Config, family: str) -> None:
    known = _FAMILY_KEYS[family] | _INERT
    for key in cfg.data:
        if key not in known:
            raise SpecError(cfg.where, key, f"a key the {family} translation knows (rackplan cannot price it, "
                            "so it refuses rather than guess)")
    required = {**_REQUIRED_VALUES, **(_QWEN3_VALUES if family == "qwen3_moe" else {})}
    for key, accepted in required.items():
        if key in cfg.data and cfg.data[key] not in accepted:
            raise cfg.fail(key, " or ".join(repr(a) for a in accepted) + " (the only value the spec expresses)")


def _common(cfg: _Config) -> dict:
    return {"num_layers": cfg.int("num_hidden_layers"), "hidden_size": cfg.int("hidden_size"),
            "vocab_size": cfg.int("vocab_size")}


def _deepseek(cfg: _Config, family: str, dtypes: Dtypes, name: str, source: str) -> ModelSpec:
    """DeepSeek-V3 / R1, Kimi K2, DeepSeek-V3.2 (MLA) and GLM-4.5 (GQA) on the DeepSeek MoE block."""
    layers = cfg.int("num_hidden_layers")
    attn = _gqa(cfg, dtypes, layers) if family == "glm4_moe" else _mla(cfg, family, dtypes, layers)
    # glm4_moe has no scoring_func key: its gate is sigmoid (vLLM glm4_moe.py Glm4MoE); the
    # DeepSeek configs' default is HF DeepseekV3Config's (softmax), though every release names it
    moe = _deepseek_moe(cfg, "sigmoid" if family == "glm4_moe" else "softmax")
    if family == "glm4_moe":  # its gate runs in FP32 on FP32 activations (vLLM glm4_moe.py Glm4MoE: nn.Linear of
        moe = dataclasses.replace(moe, router_compute="fp32")  # dtype float32, hidden_states.to(torch.float32))
    dense = cfg.int("first_k_dense_replace", 0)
    spec = ModelSpec(name=name, num_dense_layers=dense, dense_intermediate=cfg.int("intermediate_size") if dense else 0,
                     attention=attn, moe=moe, dtypes=dtypes, source=source, **_common(cfg))
    return _with_mtp(cfg, spec)


def _deepseek_moe(cfg: _Config, scoring: Literal["softmax", "sigmoid", "sqrtsoftplus"]) -> MoESpec:
    """The DeepSeek MoE block's keys (routed + shared experts, group-limited top-k, scaling)."""
    scoring = cfg.get("scoring_func", scoring)  # (Any: checked below)
    if scoring not in ("softmax", "sigmoid", "sqrtsoftplus"):
        raise cfg.fail("scoring_func", "softmax, sigmoid or sqrtsoftplus")
    return MoESpec(num_experts=cfg.int("n_routed_experts"), top_k=cfg.int("num_experts_per_tok"),
                   num_shared_experts=cfg.int("n_shared_experts", 0),
                   expert_intermediate=cfg.int("moe_intermediate_size"), scoring=scoring,
                   num_groups=cfg.int("n_group", 1), topk_groups=cfg.int("topk_group", 1),
                   routed_scaling=cfg.number("routed_scaling_factor", 1.0))


def _mla(cfg: _Config, family: str, dtypes: Dtypes, layers: int) -> AttentionSpec:
    lora, rope = cfg.int("kv_lora_rank"), cfg.int("qk_rope_head_dim")
    nope, v = cfg.int("qk_nope_head_dim"), cfg.int("v_head_dim")
    if family == "deepseek_v32":
        # vLLM's sparse-MLA FP8 cache: latent in FP8 + an FP32 scale per 128 + rope in BF16 (656 B);
        # DSA runs MLA's absorbed (MQA) form in prefill too; FlashMLA's sparse kernels pad heads
        idx_dim = cfg.int("index_head_dim")
        comp = KVComponent("mla_latent_sparse", layers, layers, entry_bytes=lora + lora // 128 * 4 + rope * 2,
                           qk_dim=lora + rope, v_dim=lora, prefill_qk_dim=lora + rope, prefill_v_dim=lora,
                           topk=cfg.int("index_topk"), indexer_heads=cfg.int("index_n_heads"), indexer_dim=idx_dim,
                           indexer_key_bytes=idx_dim + idx_dim // 128 * 4, padded_heads=True)
    else:
        comp = KVComponent("mla_latent", layers, layers, entry_bytes=(lora + rope) * _bytes(dtypes.kv_cache),
                           qk_dim=lora + rope, v_dim=lora, prefill_qk_dim=nope + rope, prefill_v_dim=v)
    q_lora = cfg.get("q_lora_rank")
    return AttentionSpec(kind="mla", num_heads=cfg.int("num_attention_heads"), kv=(comp,),
                         q_lora_rank=cfg.int("q_lora_rank") if q_lora is not None else None, kv_lora_rank=lora,
                         qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v)


def _gqa(cfg: _Config, dtypes: Dtypes, layers: int, windows: tuple = (), sinks: bool = False) -> AttentionSpec:
    """GQA: K and V of every KV head per token; `windows`: (name, layer indices, window) components instead
    of one full-context component (gpt-oss's sliding / full alternation); `sinks`: one logit per head."""
    heads, kv_heads = cfg.int("num_attention_heads"), cfg.int("num_key_value_heads")
    d = cfg.int("head_dim", cfg.int("hidden_size") // max(heads, 1))  # transformers' default when absent
    entry = 2 * kv_heads * d * _bytes(dtypes.kv_cache)
    if not windows:
        kv: tuple[KVComponent, ...] = (KVComponent("gqa_kv", layers, layers, entry_bytes=entry, qk_dim=d, v_dim=d),)
    else:
        kv = tuple(KVComponent(n, len(ids), len(ids), entry_bytes=entry, qk_dim=d, v_dim=d, window=w,
                               layer_ids=tuple(ids)) for n, ids, w in windows if ids)
    return AttentionSpec(kind="gqa", num_heads=heads, num_kv_heads=kv_heads, head_dim=d, kv=kv,
                         sinks=True if sinks else None)


def _qwen3(cfg: _Config, family: str, dtypes: Dtypes, name: str, source: str) -> ModelSpec:
    """Qwen3-MoE: GQA, every layer MoE, no shared expert, softmax top-k."""
    moe = MoESpec(num_experts=cfg.int("num_experts"), top_k=cfg.int("num_experts_per_tok"), num_shared_experts=0,
                  expert_intermediate=cfg.int("moe_intermediate_size"), scoring="softmax")
    return ModelSpec(name=name, num_dense_layers=0, attention=_gqa(cfg, dtypes, cfg.int("num_hidden_layers")),
                     moe=moe, dtypes=dtypes, source=source, **_common(cfg))


def _gpt_oss(cfg: _Config, family: str, dtypes: Dtypes, name: str, source: str) -> ModelSpec:
    """gpt-oss: GQA alternating sliding-window and full layers (each placed as layer_types says), attention
    sinks (one learned logit per head and layer), softmax top-k over SwiGLU experts. Not in the spec (each
    below 0.01% of the parameters and of a layer's FLOPs): the q/k/v/o and expert biases."""
    layers = cfg.int("num_hidden_layers")
    types = cfg.strings("layer_types", ("sliding_attention", "full_attention"))
    if len(types) != layers:
        raise cfg.fail("layer_types", f"{layers} entries (num_hidden_layers) of sliding_attention / full_attention")
    sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
    full = [i for i, t in enumerate(types) if t != "sliding_attention"]
    attn = _gqa(cfg, dtypes, layers, (("swa", sliding, cfg.int("sliding_window")), ("full", full, None)), sinks=True)
    top_k = cfg.int("num_experts_per_tok", cfg.get("experts_per_token"))
    if cfg.get("experts_per_token", top_k) != top_k:
        raise cfg.fail("experts_per_token", f"equal to num_experts_per_tok ({top_k})")
    moe = MoESpec(num_experts=cfg.int("num_local_experts"), top_k=top_k, num_shared_experts=0,
                  expert_intermediate=cfg.int("intermediate_size"), scoring="softmax")
    return ModelSpec(name=name, num_dense_layers=0, attention=attn, moe=moe, dtypes=dtypes, source=source,
                     **_common(cfg))


def _deepseek_v4(cfg: _Config, family: str, dtypes: Dtypes, name: str, source: str) -> ModelSpec:
    """DeepSeek-V4 (Flash / Pro): every layer keeps a sliding window; `compress_ratios` makes a layer CSA
    (ratio 4, indexer top-k), HCA (ratio 128) or window-only (0). Hash-routed first layers
    (num_hash_layers) are priced as routed: the spec has no hash router (its cost is a lookup)."""
    layers, d = cfg.int("num_hidden_layers"), cfg.int("head_dim")
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < layers or any(
            isinstance(r, bool) or r not in (0, 4, 128) for r in ratios[:layers]):
        raise cfg.fail("compress_ratios", f"at least num_hidden_layers ({layers}) entries of 0, 4 or 128")
    entry = d * _bytes(dtypes.kv_cache)  # one 512-d latent per entry
    idx = cfg.int("index_head_dim")
    kv = (KVComponent("swa", layers, layers, entry_bytes=entry, qk_dim=d, v_dim=d, window=cfg.int("sliding_window")),
          KVComponent("csa", ratios[:layers].count(4), ratios[:layers].count(4), entry_bytes=entry, qk_dim=d, v_dim=d,
                      ratio=4, topk=cfg.int("index_topk"), indexer_heads=cfg.int("index_n_heads"), indexer_dim=idx,
                      indexer_key_bytes=idx * 2, indexer_ratio=4),  # BF16 keys (deepseek-v4-flash.yaml)
          KVComponent("hca", ratios[:layers].count(128), ratios[:layers].count(128), entry_bytes=entry, qk_dim=d,
                      v_dim=d, ratio=128))
    attn = AttentionSpec(kind="csa", num_heads=cfg.int("num_attention_heads"), head_dim=d,
                         num_kv_heads=cfg.int("num_key_value_heads"), q_lora_rank=cfg.int("q_lora_rank"),
                         qk_rope_head_dim=cfg.int("qk_rope_head_dim"), o_lora_rank=cfg.int("o_lora_rank"),
                         o_groups=cfg.int("o_groups"), kv=tuple(c for c in kv if c.layers))
    spec = ModelSpec(name=name, num_dense_layers=0, attention=attn, moe=_deepseek_moe(cfg, "sqrtsoftplus"),
                     dtypes=dtypes, source=source,
                     hc_mult=cfg.int("hc_mult", 0), **_common(cfg))
    return _with_mtp(cfg, spec)


def _with_mtp(cfg: _Config, spec: ModelSpec) -> ModelSpec:
    """Add the MTP drafter: num_nextn_predict_layers decoder layers (MoE), each proposing one token."""
    n = cfg.int("num_nextn_predict_layers", 0)
    if not n:
        return spec
    h, moe = spec.hidden_size, spec.moe
    expert = moe.expert_params(h)
    # one MTP layer: attention + router + shared experts + eh_proj (2h -> h); routed experts apart
    dense = spec.attention.projection_params(h) + h * moe.num_experts + moe.num_shared_experts * expert + 2 * h * h
    total = n * (dense + moe.num_experts * expert)
    active = dense + moe.top_k * expert + h * spec.vocab_size  # + the shared head, read whole (the embedding: rows)
    from dataclasses import replace

    # one weight dtype for the drafter: the attention's (a pass reads mostly attention, eh_proj and head)
    return replace(spec, draft=DraftSpec(kind="mtp", num_tokens=n, forward_passes=n, active_params=float(active),
                                         total_params=float(total), weight_dtype=spec.dtypes.attention_weights,
                                         num_experts=moe.num_experts, top_k=moe.top_k, expert_params=float(expert)))


# --- quantisation -----------------------------------------------------------------------------------

# A module of each class the spec prices apart, as checkpoints name them (DeepSeek / Qwen / gpt-oss).
_MODULES = {
    "attention": ("model.layers.5.self_attn.q_proj", "model.layers.5.self_attn.q_a_proj",
                  "model.layers.5.self_attn.o_proj"),
    "experts": ("model.layers.5.mlp.experts.0.gate_proj", "model.layers.5.mlp.experts"),
    "dense": ("model.layers.0.mlp.gate_proj", "model.layers.5.mlp.shared_experts.gate_proj"),
}
_TORCH_DTYPES: dict[Optional[str], Dtype] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", None: "bf16"}


def _excluded(patterns: list, cls: str) -> bool:
    """Whether a module of class `cls` is kept unquantised by a modules_to_not_convert / ignore list."""
    return any(fnmatch.fnmatch(mod, pat) or fnmatch.fnmatch(mod, f"{pat}.*") or fnmatch.fnmatch(mod, f"*{pat}")
               for pat in patterns for mod in _MODULES[cls])


def _dtypes(cfg: _Config, family: str, quant: Optional[dict]) -> Dtypes:
    """Weight dtypes from the quantisation block; KV / dispatch / compute follow them (module docstring)."""
    torch_dtype = cfg.get("torch_dtype", cfg.get("dtype"))
    base = _TORCH_DTYPES.get(torch_dtype) if torch_dtype is None or isinstance(torch_dtype, str) else None
    if base is None:
        raise cfg.fail("torch_dtype", "bfloat16, float16 or float32")
    q = cfg.get("quantization_config") or (quant or {}).get("quantization")
    fmt, kv8, keep = _quant_format(cfg, q)
    # (fmt: one of _quant_format's dtype names)
    weights = {cls: cast(Dtype, base if fmt is None or _excluded(keep, cls) else fmt) for cls in _MODULES}
    if family in ("qwen3_moe", "gpt_oss"):
        weights["dense"] = weights["attention"]  # no dense FFN nor shared expert: unused, kept alike
    if family == "deepseek_v4" and cfg.get("expert_dtype") is not None:
        if cfg.get("expert_dtype") != "fp4":
            raise cfg.fail("expert_dtype", "'fp4' (MXFP4 routed experts)")
        weights["experts"] = "mxfp4"
    # an 8-bit checkpoint (FP8 weights, or an FP8 KV cache beside NVFP4) serves 8-bit activations:
    # its FP4 experts run in fp4; a BF16-activation checkpoint (gpt-oss) runs its FP4 experts in BF16
    eight = fmt in ("fp8", "fp8_block") or kv8
    four = weights["experts"] in ("mxfp4", "nvfp4")
    return Dtypes(attention_weights=weights["attention"], expert_weights=weights["experts"],
                  dense_weights=weights["dense"], activations=base,
                  kv_cache="bf16" if family == "deepseek_v4" else ("fp8" if eight else base),
                  dispatch="fp8" if eight else base, combine="bf16" if base == "bf16" else base,
                  compute=cast(Dtype, {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4"}.get(weights["attention"],
                                                                                            base)),
                  expert_compute="fp4" if four and eight else None)


def _quant_format(cfg: _Config, q: Optional[dict]) -> tuple[Optional[str], bool, list]:
    """(weight format, FP8 KV cache, modules kept unquantised) of a quantisation block."""
    if not q:
        return None, False, []
    if not isinstance(q, dict):
        raise cfg.fail("quantization_config", "a mapping")
    method = str(q.get("quant_method", "modelopt" if "quant_algo" in q else "")).lower()
    keep = q.get("modules_to_not_convert") or q.get("ignore") or q.get("exclude_modules") or []
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise SpecError(cfg.where, "quantization_config.modules_to_not_convert", "a list of module name patterns",
                        keep)
    if method == "fp8":
        block = q.get("weight_block_size")
        if block not in (None, [128, 128]):
            raise SpecError(cfg.where, "quantization_config.weight_block_size", "[128, 128] (DeepSeek FP8 blocks)",
                            block)
        return ("fp8_block" if block else "fp8"), False, keep
    if method == "mxfp4":
        return "mxfp4", False, keep
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        if algo not in ("NVFP4", "FP8"):
            raise SpecError(cfg.where, "quantization_config.quant_algo", "NVFP4 or FP8", q.get("quant_algo"))
        return algo.lower(), str(q.get("kv_cache_quant_algo", "")).upper() == "FP8", keep
    raise SpecError(cfg.where, "quantization_config.quant_method", "fp8 (block), mxfp4 or modelopt (NVFP4 / FP8)",
                    q.get("quant_method"))


def _bytes(dtype: str) -> float:
    from .model import DTYPE_BYTES

    return DTYPE_BYTES[dtype]


def param_ranges(spec: ModelSpec) -> dict[str, tuple[float, float]]:
    """Parameter counts as publishers state them, each a (low, high) pair of conventions:
    total without .. with the MTP layer(s); active per token from the decoder layers alone
    (attention, dense FFN, shared + top-k routed experts, routers) .. plus the embedding and head."""
    p, moe, h = spec.param_counts(), spec.moe, spec.hidden_size
    total = sum(p.values())
    layers = total - p["embed_head"] - p["routed_experts"] + moe.top_k * moe.expert_params(h) * spec.num_moe_layers
    return {"total": (total, total + (spec.draft.total_params if spec.draft else 0.0)),
            "active": (layers, layers + p["embed_head"])}


def load_config_spec(path: str | Path) -> ModelSpec:
    """The ModelSpec of a config.json file (an hf_quant_config.json beside it supplies a missing
    quantisation block, as ModelOpt checkpoints ship it)."""
    from .reading import read_json

    path = Path(path)
    quant_path = path.parent / "hf_quant_config.json"
    quant = read_json(quant_path, "hf_quant_config.json") if quant_path.is_file() else None
    repo = repo_of(path)
    rev = path.parent.name if path.parent.parent.name == "snapshots" else ""
    source = (f"{repo} config.json" + (f" (revision {rev})" if rev else "")) if repo else str(path)
    return spec_from_config(read_json(path, "config.json"), str(path), model_name(path), source, quant)
