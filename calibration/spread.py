"""Step-time spread from a sweep's steps: how far one measured step's time lies from its shape's median.

The fit prices a shape's median step (calibration/samples.py: the median over each run's median); the
steps behind it scatter about it. Per step kind (prefill, decode), over the fit set's sweep shapes:

    r = log(step_s / median step_s of its shape, over every run of that shape)
    sd = (q90(r) - q10(r)) / (2 x 1.2816)       the log-normal sd that puts p10 and p90 where measured
    corr = Pearson correlation of r_t and r_(t+1), consecutive steps of one run of one shape

The quantile form of sd reads the spread the latency gates read (p90 over p50) and a rare stall does not
blow it up. Residuals about the median over all runs keep the run-to-run offsets (the load a run met):
they show as correlation between consecutive steps, as a slow minute does in serving. The simulator draws
each step as price x exp(AR(1) with this sd and corr) (sim/step_spread.py). Serving-mode steps (every
one a shape of its own) have no median to scatter about and are not read.
"""
from __future__ import annotations

import numpy as np

from .fit import _sig
from .samples import StepSample, shape_groups

Z90 = 1.2815516  # standard normal 90th percentile
MIN_STEPS = 10  # steps of a kind (in shapes with >= 2 steps) before its sd is given
MIN_PAIRS = 10  # consecutive step pairs before its correlation is given (else 0: independent steps)


def residuals(raw: list[StepSample]) -> dict[str, list[tuple[int, tuple, int, float]]]:
    """Per kind: (run, shape, step, log(step_s / its shape's median)) of every sweep step in a shape with
    at least two steps."""
    out: dict[str, list] = {"prefill": [], "decode": []}
    for key, group in shape_groups([s for s in raw if not s.serve]).items():
        if len(group) < 2:
            continue
        med = float(np.median([s.step_s for s in group]))
        out[group[0].role] += [(s.run, key, s.steps[0], float(np.log(s.step_s / med))) for s in group]
    return out


def step_spread(raw: list[StepSample]) -> tuple[dict[str, float], dict[str, float], dict[str, dict]]:
    """(sd per kind, lag-1 correlation per kind, what each came from) of the sweep steps `raw`."""
    sd, corr, info = {}, {}, {}
    for kind, rows in residuals(raw).items():
        if len(rows) < MIN_STEPS:
            continue
        r = np.array([x for *_, x in rows])
        q10, q90 = np.percentile(r, [10, 90])
        sd[kind] = _sig(max((q90 - q10) / (2 * Z90), 0.0))
        a, b = _pairs(rows)
        c = float(np.corrcoef(a, b)[0, 1]) if len(a) >= MIN_PAIRS and np.std(a) > 0 and np.std(b) > 0 else 0.0
        if c > 0:
            corr[kind] = _sig(min(c, 0.95))
        info[kind] = {"steps": len(rows), "pairs": len(a), "p10_p50_p90": [_sig(v) for v in
                                                                              np.percentile(r, [10, 50, 90])]}
    return sd, corr, info


def _pairs(rows: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """(r_t, r_t+1) over consecutive steps (step numbers one apart) of one run of one shape."""
    seen = {(run, key, step): x for run, key, step, x in rows}
    a = [(x, seen[(run, key, step + 1)]) for (run, key, step), x in seen.items() if (run, key, step + 1) in seen]
    return np.array([p for p, _ in a]), np.array([q for _, q in a])
