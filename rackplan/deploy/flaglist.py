"""The kept list of vLLM command-line flags (and their choices) the deployment generator may emit, and
its extractor.

`vllm_flags.txt` holds, per tool, every long flag of that tool's CLI at one pinned release (the header
names the releases, the files they came from and their hashes), and per flag with a closed set of
values, those values (`[tool choices]` sections: `--flag value value ...`). `checked` holds every
flag and value the generator writes against it, and against REQUIRES (flags that need another flag
or value, each read from the sources named), so a misspelt flag, a value vLLM refuses or a missing
partner fails CI instead of a deployment.

Regenerate after an upgrade (no install needed, the sources are only read):
    pip download vllm==X vllm-router==Y --no-deps --only-binary=:all: -d W
    unzip -q W/vllm-X-*.whl 'vllm/*' -d W/src && unzip -q W/vllm_router-Y-*.whl 'vllm_router/*' -d W/src
    python -m rackplan.deploy.flaglist W/src W/vllm-X-*.whl W/vllm_router-Y-*.whl > rackplan/deploy/vllm_flags.txt
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
def _sections() -> dict[str, list[str]]:
    """{section: lines} of the kept file; '#' lines are provenance comments."""
    out: dict[str, list[str]] = {}
    sec = None
    for line in FLAG_FILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            sec = line[1:-1]
            out[sec] = []
        elif sec is not None:
            out[sec].append(line)
    return out


def load() -> dict[str, frozenset[str]]:
    """{tool: flags} from the kept file."""
    return {k: frozenset(v) for k, v in _sections().items() if k in TOOLS}


def choices(tool: str) -> dict[str, frozenset[str]]:
    """{flag: the values `tool` accepts} for its flags with a closed set of values."""
    rows = (line.split() for line in _sections().get(f"{tool} choices", []))
    return {r[0]: frozenset(r[1:]) for r in rows}


def _value(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag:
            return args[i + 1] if i + 1 < len(args) else ""
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


# (tool, flag, what it needs, check, source): pairs vLLM checks at start-up, read from the wheels' sources
REQUIRES = (
    ("vllm serve", "--enable-eplb", "--enable-expert-parallel",
     lambda a: "--enable-expert-parallel" in a,
     "vllm/config/parallel.py: enable_expert_parallel must be True to use EPLB"),
    ("vllm serve", "--eplb-config", "--enable-eplb",
     lambda a: "--enable-eplb" in a, "vllm/config/parallel.py: num_redundant_experts set but EPLB is not enabled"),
    ("vllm serve", "--data-parallel-size-local", "--data-parallel-size >= it",
     lambda a: int(_value(a, "--data-parallel-size") or 1) >= int(_value(a, "--data-parallel-size-local") or 1)
     if (_value(a, "--data-parallel-size-local") or "1").isdigit() else "--data-parallel-size" in a,
     "vllm/config/parallel.py: data_parallel_size_local must be <= data_parallel_size"),
    ("vllm serve", "--data-parallel-hybrid-lb", "--data-parallel-size-local",
     lambda a: "--data-parallel-size-local" in a, "vllm/engine/arg_utils.py (hybrid LB: local DP size per node)"),
    ("vllm bench serve", "--self-timed", "--dataset-name timed_trace",
     lambda a: _value(a, "--dataset-name") == "timed_trace",
     "vllm/benchmarks/serve.py: --self-timed is only supported with --dataset-name=timed_trace"),
    ("vllm-router", "--intra-node-data-parallel-size", "--api-key when > 1",
     lambda a: (_value(a, "--intra-node-data-parallel-size") or "1") == "1" or "--api-key" in a,
     "vllm_router/router_args.py: api key required for intra-node data parallel routing"),
    ("vllm-router", "--vllm-pd-disaggregation", "--prefill and --decode",
     lambda a: "--prefill" in a and "--decode" in a, "vllm_router/router_args.py (P/D mode)"),
)


def bad_values(tool: str, args: list[str]) -> list[str]:
    """`flag=value` for each value outside the flag's kept choices, and each REQUIRES entry not met."""
    out = []
    for flag, ok in choices(tool).items():
        v = _value(args, flag)
        if v is not None and v not in ok:
            out.append(f"{flag}={v}")
    return out + [f"{flag} needs {needs} ({src})" for t, flag, needs, check, src in REQUIRES
                  if t == tool and flag in args and not check(args)]


def header() -> list[str]:
    """The provenance comment lines of the kept file (vLLM version, source, hash)."""
    return [ln[1:].strip() for ln in FLAG_FILE.read_text().splitlines() if ln.startswith("#")]


def unknown(tool: str, args: list[str]) -> list[str]:
    """Long flags in `args` (`--x` or `--x=v`) that `tool`'s kept list does not have."""
    known = load()[tool]
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    return [f for f in flags if f not in known]


# ---- extraction from vLLM / vllm-router source trees (maintenance; not used at run time) ----

def _flag_text(node: ast.AST) -> str | None:
    """'--x' from a string literal, or from an f-string whose fields are a prefix that defaults to ''
    (vllm-router's f"--{prefix}policy")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return None


def _add_argument_calls(path: Path, funcs: set[str]):
    """(flags, call) of each add_argument call inside the named functions."""
    tree = ast.parse(path.read_text())
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name in funcs:
            for call in ast.walk(fn):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument":
                    flags = {t for t in map(_flag_text, call.args) if t and t.startswith("--")}
                    yield flags, call


def _literal_flags(path: Path, funcs: set[str]) -> set[str]:
    """String literals starting with '--' passed to add_argument inside the named functions."""
    out = set()
    for flags, call in _add_argument_calls(path, funcs):
        if any("BooleanOptionalAction" in ast.unparse(k.value) for k in call.keywords):
            flags |= {"--no-" + f[2:] for f in flags}
        out |= flags
    return out


def _literal_choices(path: Path, funcs: set[str]) -> dict[str, list[str]]:
    """{flag: values} of add_argument calls whose `choices=` is a literal list of strings."""
    out = {}
    for flags, call in _add_argument_calls(path, funcs):
        for k in call.keywords:
            if k.arg == "choices" and isinstance(k.value, (ast.List, ast.Tuple, ast.Set)):
                vals = [e.value for e in k.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if len(vals) == len(k.value.elts):
                    out.update({f: vals for f in flags})
    return out


def _literal_aliases(folder: Path) -> dict[str, list[str]]:
    """{name: values} of module-level `Name = Literal["a", ...]` in the files of `folder`."""
    raw: dict[str, list[ast.expr]] = {}
    for path in sorted(folder.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Subscript) and ast.unparse(node.value.value) == "Literal"):
                sl = node.value.slice
                raw[node.targets[0].id] = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]

    def values(name: str, seen: frozenset = frozenset()) -> list[str]:  # Literal["auto", OtherAlias]
        out = []
        for e in raw[name]:
            if isinstance(e, ast.Constant):
                out.append(str(e.value))
            elif isinstance(e, ast.Name) and e.id in raw and e.id not in seen:
                out += values(e.id, seen | {name})
        return out

    return {name: values(name) for name in raw}


def _engine_choices(v: Path, flags: set[str]) -> dict[str, list[str]]:
    """Choices of engine flags typed with a Literal alias of vllm/config (`X` or `X | str`: a str union
    is the same list plus what a registry adds; the tokenizer registry's modes are added here)."""
    aliases = _literal_aliases(v / "config")
    out = {}
    for name, ann in _class_fields(v / "engine/arg_utils.py", {"EngineArgs"}).items():
        parts = [p.strip() for p in ann.split("|")]
        known = [p for p in parts if p in aliases]
        flag = "--" + name.replace("_", "-")
        if known and flag in flags and set(parts) - set(known) <= {"str", "None"}:
            out[flag] = sorted({c for p in known for c in aliases[p]})
    reg = v / "tokenizers/registry.py"
    if "--tokenizer-mode" in out and reg.exists():
        for node in ast.walk(ast.parse(reg.read_text())):
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_VLLM_TOKENIZERS":
                out["--tokenizer-mode"] = sorted(set(out["--tokenizer-mode"]) | {k.value for k in node.value.keys})
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


def extract(src: Path) -> dict[str, tuple[set[str], dict[str, list[str]]]]:
    """{tool: (flags, {flag: choices})} read from unpacked vLLM and vllm-router wheels (`src` holds
    the vllm/ and vllm_router/ folders)."""
    v = src / "vllm"
    engine = _literal_flags(v / "engine/arg_utils.py", {"add_cli_args"})
    engine_fields = _class_fields(v / "engine/arg_utils.py", {"EngineArgs", "AsyncEngineArgs"})
    front_fields = _class_fields(v / "entrypoints/common/cli_args.py", {"BaseFrontendArgs", "FrontendArgs"})
    front = {"--" + f.replace("_", "-") for f in front_fields}
    serve = _literal_flags(v / "entrypoints/common/cli_args.py", {"make_arg_parser"})
    serve_all = _with_negations(engine, engine_fields) | _with_negations(front, front_fields) | serve
    bench_files = ((v / "benchmarks/serve.py", {"add_cli_args"}),
                   (v / "benchmarks/datasets/datasets.py", {"add_dataset_parser"}))
    bench = set().union(*(_literal_flags(p, f) for p, f in bench_files))
    bench_choices = {k: c for p, f in bench_files for k, c in _literal_choices(p, f).items()}
    router_file = src / "vllm_router/router_args.py"
    return {"vllm serve": (serve_all, _engine_choices(v, serve_all)),
            "vllm bench serve": (bench, bench_choices),
            "vllm-router": (_literal_flags(router_file, {"add_cli_args"}),
                            _literal_choices(router_file, {"add_cli_args"}))}


def main(argv: list[str]) -> int:
    src, wheel, router_wheel = Path(argv[0]), Path(argv[1]), Path(argv[2])
    version = (src / "vllm/_version.py").read_text().split("__version__ = version = ")[1].split("\n")[0]
    print(f"# vLLM {version.strip(chr(39))} CLI flags, extracted by `python -m rackplan.deploy.flaglist` from")
    for w in (wheel, router_wheel):
        print(f"# the PyPI wheel {w.name} (sha256 {hashlib.sha256(w.read_bytes()).hexdigest()}),")
    print("# vllm/engine/arg_utils.py (EngineArgs.add_cli_args; choices from the Literal types of vllm/config and")
    print("# vllm/tokenizers/registry.py), vllm/entrypoints/common/cli_args.py (FrontendArgs, make_arg_parser),")
    print("# vllm/benchmarks/serve.py + benchmarks/datasets/datasets.py, vllm_router/router_args.py (add_cli_args).")
    for tool, (flags, opts) in extract(src).items():
        print(f"\n[{tool}]")
        print("\n".join(sorted(flags)))
        print(f"\n[{tool} choices]")
        print("\n".join(f"{f} {' '.join(opts[f])}" for f in sorted(opts)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
