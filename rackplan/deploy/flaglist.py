"""The kept list of vLLM command-line flags the deployment generator may emit, and its extractor.

`vllm_flags.txt` holds, per tool, every long flag of that tool's documented CLI at one pinned
release (the header names the release, the file it came from and its hash). Tests hold every flag
the generator writes against it, so a misspelt or removed flag fails CI instead of a deployment.

Regenerate after a vLLM upgrade (no vLLM install needed, the sources are only read):
    pip download vllm==X --no-deps --only-binary=:all: -d W && unzip -q W/vllm-*.whl 'vllm/*' -d W/src
    python -m rackplan.deploy.flaglist W/src W/vllm-X-*.whl > rackplan/deploy/vllm_flags.txt
The vllm-router section is kept by hand from its README (it is a separate Rust binary).
"""
from __future__ import annotations

import ast
import hashlib
import sys
from functools import lru_cache
from pathlib import Path

FLAG_FILE = Path(__file__).with_name("vllm_flags.txt")
TOOLS = ("vllm serve", "vllm bench serve", "vllm-router")


@lru_cache(maxsize=1)
def load() -> dict[str, frozenset[str]]:
    """{tool: flags} from the kept file; '#' lines are provenance comments."""
    out: dict[str, set[str]] = {}
    tool = None
    for line in FLAG_FILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            tool = line[1:-1]
            out[tool] = set()
        elif tool is not None:
            out[tool].add(line)
    return {k: frozenset(v) for k, v in out.items()}


def header() -> list[str]:
    """The provenance comment lines of the kept file (vLLM version, source, hash)."""
    return [ln[1:].strip() for ln in FLAG_FILE.read_text().splitlines() if ln.startswith("#")]


def unknown(tool: str, args: list[str]) -> list[str]:
    """Long flags in `args` (`--x` or `--x=v`) that `tool`'s kept list does not have."""
    known = load()[tool]
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    return [f for f in flags if f not in known]


# ---- extraction from a vLLM source tree (maintenance; not used at run time) ----

def _literal_flags(path: Path, funcs: set[str]) -> set[str]:
    """String literals starting with '--' passed to add_argument inside the named functions."""
    out = set()
    tree = ast.parse(path.read_text())
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name in funcs:
            for call in ast.walk(fn):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument":
                    flags = {a.value for a in call.args if isinstance(a, ast.Constant)
                             and isinstance(a.value, str) and a.value.startswith("--")}
                    if any("BooleanOptionalAction" in ast.unparse(k.value) for k in call.keywords):
                        flags |= {"--no-" + f[2:] for f in flags}
                    out |= flags
    return out


def _class_fields(path: Path, classes: set[str]) -> dict[str, str]:
    """{field: annotation source} of dataclass-style classes."""
    tree = ast.parse(path.read_text())
    out = {}
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and cls.name in classes:
            for node in cls.body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    out[node.target.id] = ast.unparse(node.annotation)
    return out


def _with_negations(flags: set[str], fields: dict[str, str]) -> set[str]:
    """argparse.BooleanOptionalAction adds --no-X for every boolean field vLLM exposes as --X."""
    neg = {"--no-" + f[2:] for f in flags if "bool" in fields.get(f[2:].replace("-", "_"), "")}
    return flags | neg


def extract(src: Path) -> dict[str, set[str]]:
    """{tool: flags} read from an unpacked vLLM wheel's sources (`src` holds the vllm/ folder)."""
    v = src / "vllm"
    engine = _literal_flags(v / "engine/arg_utils.py", {"add_cli_args"})
    engine_fields = _class_fields(v / "engine/arg_utils.py", {"EngineArgs", "AsyncEngineArgs"})
    front_fields = _class_fields(v / "entrypoints/common/cli_args.py", {"BaseFrontendArgs", "FrontendArgs"})
    front = {"--" + f.replace("_", "-") for f in front_fields}
    serve = _literal_flags(v / "entrypoints/common/cli_args.py", {"make_arg_parser"})
    serve_all = _with_negations(engine, engine_fields) | _with_negations(front, front_fields) | serve
    bench = _literal_flags(v / "benchmarks/serve.py", {"add_cli_args"}) | _literal_flags(
        v / "benchmarks/datasets/datasets.py", {"add_dataset_parser"})
    return {"vllm serve": serve_all, "vllm bench serve": bench}


def main(argv: list[str]) -> int:
    src, wheel = Path(argv[0]), Path(argv[1])
    version = (src / "vllm/_version.py").read_text().split("__version__ = version = ")[1].split("\n")[0]
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    print(f"# vLLM {version.strip(chr(39))} CLI flags, extracted by `python -m rackplan.deploy.flaglist` from")
    print(f"# the PyPI wheel {wheel.name} (sha256 {digest}):")
    print("# vllm/engine/arg_utils.py (EngineArgs.add_cli_args), vllm/entrypoints/common/cli_args.py")
    print("# (FrontendArgs, make_arg_parser), vllm/benchmarks/serve.py + benchmarks/datasets/datasets.py.")
    for tool, flags in extract(src).items():
        print(f"\n[{tool}]")
        print("\n".join(sorted(flags)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
