"""The models built from published config.json files: parameter counts (analytic, from the spec) side by side
with the published figures, each as the interval of publishers' conventions (rackplan/specs/hf_config.py
param_ranges), and the fields where a hand-written spec differs from the one its config.json gives.

    python benchmarks/hf_models.py
"""
from __future__ import annotations

from pathlib import Path

from rackplan.specs import load_model, to_dict
from rackplan.specs.hf_config import load_config_spec, param_ranges

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "hf_configs"  # the published config.json files (README there cites each)
# name, config folder, published total and active (parameters), where published
SHIPPED = [  # checked by tests/unit/test_shipped_hf_models.py
    ("kimi-k2", "moonshotai--Kimi-K2-Instruct", 1.0e12, 32e9, "moonshotai/Kimi-K2-Instruct README (model card)"),
    ("qwen3-30b-a3b", "Qwen--Qwen3-30B-A3B", 30.5e9, 3.3e9, "Qwen/Qwen3-30B-A3B README (model card)"),
    ("qwen3-coder-480b-a35b", "Qwen--Qwen3-Coder-480B-A35B-Instruct", 480e9, 35e9,
     "Qwen/Qwen3-Coder-480B-A35B-Instruct README (model card)"),
    ("glm-4.5", "zai-org--GLM-4.5", 355e9, 32e9, "zai-org/GLM-4.5 README (model card)"),
    ("gpt-oss-120b", "openai--gpt-oss-120b", 116.8e9, 5.1e9, "OpenAI gpt-oss-120b & gpt-oss-20b model card"),
    ("deepseek-v4-pro", "deepseek-ai--DeepSeek-V4-Pro", 1.6e12, 49e9, "deepseek-ai/DeepSeek-V4-Pro README"),
]

ROUND_TRIP = [("deepseek-v3", "deepseek-ai--DeepSeek-V3"), ("deepseek-v3.2", "deepseek-ai--DeepSeek-V3.2"),
              ("deepseek-v4-flash", "deepseek-ai--DeepSeek-V4-Flash"), ("qwen3-235b-a22b", "Qwen--Qwen3-235B-A22B")]


def off(published: float, lo: float, hi: float) -> str:
    """How far the published figure lies outside [lo, hi] (0 inside), in percent of the nearer end."""
    if lo <= published <= hi:
        return "inside"
    end = lo if published < lo else hi
    return f"{(published / end - 1) * 100:+.2f}%"


def differing(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in dict.fromkeys([*a, *b]):
            yield from differing(a.get(k), b.get(k), f"{path}.{k}" if path else k)
    elif a != b:
        yield path, a, b


def main() -> None:
    print(f"{'model':24} {'total (B), analytic':>22} {'published':>10} {'off':>8}   "
          f"{'active (B), analytic':>22} {'published':>10} {'off':>8}")
    for name, _repo, total, active, _where in SHIPPED:
        r = param_ranges(load_model(name))
        (tl, th), (al, ah) = r["total"], r["active"]
        print(f"{name:24} {tl / 1e9:10,.2f} .. {th / 1e9:8,.2f} {total / 1e9:10,.2f} {off(total, tl, th):>8}   "
              f"{al / 1e9:10,.2f} .. {ah / 1e9:8,.2f} {active / 1e9:10,.2f} {off(active, al, ah):>8}")
    print("\nhand-written spec vs the one built from its config.json (fields that differ):")
    for name, repo in ROUND_TRIP:
        diffs = [(p, a, b) for p, a, b in differing(to_dict(load_model(name)),
                                                     to_dict(load_config_spec(DATA / repo / "config.json")))
                 if p != "source"]
        print(f"  {name}: " + ("; ".join(f"{p} {a} (yaml) vs {b} (config)" for p, a, b in diffs) or "none"))


if __name__ == "__main__":
    main()
