"""Fuzz every input reader with mutated files: each outcome must be a success or a one-line SpecError.

The mutations are those of tests/unit/test_reading_property.py (tokens and bytes spliced in,
truncation at a line end or anywhere), drawn from a seeded stream, many more per reader than the
test runs. Prints per reader how many files were read, refused, or raised anything else (with
the first traceback of each kind); exit 1 if anything else was raised.

    python benchmarks/fuzz_readers.py [--seed 0] [--per-reader 300]
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


def fuzz(seed: int, per_reader: int) -> tuple[collections.Counter, dict]:
    rng = random.Random(seed)
    tokens = [t.encode() for t in prop.TOKENS]
    stats, bad = collections.Counter(), {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (text, suffix, reader) in prop.SOURCES.items():
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-reader", type=int, default=300)
    args = ap.parse_args()
    stats, bad = fuzz(args.seed, args.per_reader)
    for name in prop.SOURCES:
        row = {k: v for (n, k), v in stats.items() if n == name}
        print(f"{name:20s} " + ", ".join(f"{k} {v}" for k, v in sorted(row.items())))
    for (name, kind), tb in bad.items():
        print(f"--- {name}: {kind}\n{tb}")
    return 1 if bad or any(k == "multi-line SpecError" for _, k in stats) else 0


if __name__ == "__main__":
    sys.exit(main())
