"""Fuzz every input reader with mutated files: each outcome must be a success or a one-line SpecError.

Readers: those of tests/unit/test_reading_property.py plus the bench fit's (read_bench) and the op
database's reuse.yaml (EXTRA). The mutations are that test's (tokens and bytes spliced in,
truncation at a line end or anywhere), drawn from a seeded stream, many more per reader than the
test runs. Prints per reader how many files were read, refused, or raised anything else (with
the first traceback of each kind); exit 1 if anything else was raised. `--simulate N` also runs
`rackplan simulate` (6 requests) on N mutated plans, profiles and workloads each that still load:
every run must exit 0 or 2 (one line), never raise.

    python benchmarks/fuzz_readers.py [--seed 0] [--per-reader 300] [--simulate 0]
"""
from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
import test_reading_property as prop  # noqa: E402

from rackplan.specs import SpecError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _bench_fit(path):
    """The bench fit's reader (calibration/bench_fit.py: per-request fields range-checked) on tiny-cpu."""
    from rackplan.calibration.bench_fit import read_bench
    from rackplan.specs import load_plan

    return read_bench(path, load_plan("tiny-cpu"))


def _reuse(path):
    from rackplan.calibration.opdb import reuse_entries

    return reuse_entries(path)


# readers beside the property test's: (original bytes, suffix, reader)
EXTRA = {
    "vllm bench fit": ((ROOT / "tests/data/vllm_bench_detailed.json").read_bytes(), ".json", _bench_fit),
    "opdb reuse.yaml": (b"schema_version: 1\nreuse:\n- table: gemm_perf\n  from_version: 0.24.0\n  reason: same\n"
                        b"- {table: moe_perf, from_version: 0.19.0}\n", ".yaml", _reuse),
}
READERS = {**prop.SOURCES, **EXTRA}


def fuzz(seed: int, per_reader: int) -> tuple[collections.Counter, dict]:
    rng = random.Random(seed)
    tokens = [t.encode() for t in prop.TOKENS]
    stats, bad = collections.Counter(), {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (text, suffix, reader) in READERS.items():
            path = Path(tmp) / f"mutated{suffix}"
            for _ in range(per_reader):
                edits = [(rng.random(), rng.randint(0, 40), rng.choice(tokens + [bytes([rng.randint(0, 255)])]))
                         for _ in range(rng.randint(1, 4))]
                cut = None if rng.random() < 0.6 else rng.uniform(0.05, 1)
                path.write_bytes(prop.mutate(text, edits, cut))
                try:
                    reader(path)
                    stats[name, "read"] += 1
                except SpecError as exc:
                    kind = "refused" if len(str(exc).splitlines()) == 1 else "multi-line SpecError"
                    stats[name, kind] += 1
                except Exception as exc:  # noqa: BLE001 - what the fuzz looks for
                    stats[name, type(exc).__name__] += 1
                    bad.setdefault((name, type(exc).__name__), "".join(traceback.format_exception(exc)[-3:]))
    return stats, bad


SIMULATE = {  # spec -> argv of a simulate run using the mutated file at {}
    "plan": ["simulate", "--plan", "{}", "--requests", "6"],
    "profile": ["simulate", "--plan", "tiny-cpu", "--profile", "{}", "--requests", "6", "--profile-any-hardware"],
    "workload": ["simulate", "--plan", "tiny-cpu", "--workload", "{}", "--requests", "6"],
}


def fuzz_simulate(seed: int, n: int) -> tuple[collections.Counter, dict]:
    """simulate on mutated specs that still load: exit codes (and anything raised) per spec."""
    import contextlib
    import io

    from rackplan.cli import main as cli_main

    rng = random.Random(seed)
    tokens = [t.encode() for t in prop.TOKENS] + [b"0", b"1", b"7", b"-3", b"1000000"]
    stats, bad = collections.Counter(), {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutated.yaml"
        for name, argv in SIMULATE.items():
            text, _, reader = prop.SOURCES[name]
            done = 0
            while done < n:
                path.write_bytes(prop.mutate(text, [(rng.random(), rng.randint(0, 6), rng.choice(tokens))], None))
                try:
                    reader(path)
                except SpecError:
                    continue
                done += 1
                err = io.StringIO()
                try:
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                        code = cli_main([a.replace("{}", str(path)) for a in argv])
                    multi = code == 2 and len(err.getvalue().strip().splitlines()) != 1
                    stats[f"simulate {name}", "multi-line error" if multi else f"exit {code}"] += 1
                except Exception as exc:  # noqa: BLE001 - what the fuzz looks for
                    stats[f"simulate {name}", type(exc).__name__] += 1
                    bad.setdefault((f"simulate {name}", type(exc).__name__),
                                   "".join(traceback.format_exception(exc)[-3:]))
    return stats, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-reader", type=int, default=300)
    ap.add_argument("--simulate", type=int, default=0, metavar="N", help="simulate N loadable mutants per spec")
    args = ap.parse_args()
    stats, bad = fuzz(args.seed, args.per_reader)
    if args.simulate:
        more, more_bad = fuzz_simulate(args.seed, args.simulate)
        stats.update(more)
        bad.update(more_bad)
    for name in list(READERS) + [f"simulate {n}" for n in SIMULATE] * bool(args.simulate):
        row = {k: v for (n, k), v in stats.items() if n == name}
        print(f"{name:20s} " + ", ".join(f"{k} {v}" for k, v in sorted(row.items())))
    for (name, kind), tb in bad.items():
        print(f"--- {name}: {kind}\n{tb}")
    return 1 if bad or any(k.startswith("multi-line") for _, k in stats) else 0


if __name__ == "__main__":
    sys.exit(main())
