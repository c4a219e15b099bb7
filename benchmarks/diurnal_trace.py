"""Write tests/data/azure_conv_diurnal_day.csv: a synthetic day of requests in the Azure LLM inference
trace 2024 CSV format (TIMESTAMP with UTC offset, ContextTokens, GeneratedTokens), shaped like a
published day.

Shape: the hourly request rate of the Azure LLM inference trace 2024, Conversation, on Tuesday
2024-05-14 (UTC), read off the published "Number of invocations per minute" figure of
Azure/AzurePublicDataset analysis/AzureLLMInferenceDataset2024.ipynb (the DynamoLLM paper's data,
HPCA 2025): each hour's mean of the plotted curve, in invocations per minute (HOURLY below; peak
4,458 at 14:00, trough 2,247 at 23:00: a 2x swing). Arrivals: a Poisson process with that rate,
constant within each hour, thinned to 1 / SAMPLE of it (the published traces are samples too;
`plan --trace-scale` scales the rate back). Lengths: drawn (with replacement) from the rows of a
real trace, the Azure LLM inference trace 2023 conversation file (AzurePublicDataset
data/AzureLLMInferenceTrace_conv.csv, 19,366 requests; rows with 0 generated tokens skipped).
Seeded: the same inputs write the same file.

    .venv/bin/python benchmarks/diurnal_trace.py --lengths AzureLLMInferenceTrace_conv.csv
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

# invocations per minute, hour 0..23 UTC, Azure conversation trace 2024-05-14 (digitised, see the docstring)
HOURLY = (2893, 3013, 3137, 2577, 2552, 2699, 3098, 3491, 3443, 3376, 3175, 3398,
          3905, 4074, 4458, 4184, 3911, 3617, 3813, 3568, 3240, 2833, 2495, 2247)
SAMPLE = 1000  # the file holds one request in SAMPLE of the plotted rate
SEED = 0
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "azure_conv_diurnal_day.csv"


def lengths(path: Path) -> np.ndarray:
    """[N, 2] (context, generated) tokens of a real Azure trace, rows that generated a token."""
    with open(path, newline="") as f:
        rows = [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in csv.DictReader(f)]
    return np.array([r for r in rows if r[0] > 0 and r[1] > 0])


def day(pool: np.ndarray, seed: int = SEED) -> list[tuple[float, int, int]]:
    """(seconds since midnight, context, generated) of every request of the day, in arrival order."""
    rng = np.random.default_rng(seed)
    out = []
    for hour, per_min in enumerate(HOURLY):
        n = rng.poisson(per_min * 60 / SAMPLE)
        times = np.sort(rng.uniform(0.0, 3600.0, size=n)) + 3600.0 * hour
        picks = pool[rng.integers(0, len(pool), size=n)]
        out += [(float(t), int(c), int(g)) for t, (c, g) in zip(times, picks)]
    return out


def stamp(seconds: float) -> str:
    """The 2024 trace's TIMESTAMP: '2024-05-14 HH:MM:SS.ffffff+00:00'."""
    us = int(round(seconds * 1e6))
    s, frac = divmod(us, 1_000_000)
    return f"2024-05-14 {s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}.{frac:06d}+00:00"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", required=True, help="the Azure 2023 conversation trace CSV (AzurePublicDataset)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    rows = day(lengths(Path(args.lengths)))
    with open(args.out, "w", newline="") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        f.writelines(f"{stamp(t)},{c},{g}\n" for t, c, g in rows)
    print(f"{len(rows)} requests -> {args.out}")


if __name__ == "__main__":
    main()
